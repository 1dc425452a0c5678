//! libgpuquota.so — LD_PRELOAD CUDA/NVML memory-quota interceptor.
//!
//! `#![no_std]`, `panic = "abort"`, only the `libc` crate: the resulting
//! shared object needs nothing but libc.so.6 and libdl.so.2, so it can sit in
//! `/etc/ld.so.preload` of any glibc image. See docs/interceptor.md.
#![cfg_attr(not(test), no_std)]
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

pub mod config;
pub mod fmt;
pub mod ptrtable;
pub mod region;
mod slotgroup;
pub mod sys;

#[cfg(not(test))]
mod account;
#[cfg(not(test))]
mod capture;
#[cfg(not(test))]
mod ctxlife;
#[cfg(not(test))]
mod cuda;
#[cfg(not(test))]
mod dlsym_entry;
#[cfg(not(test))]
mod foreign;
#[cfg(not(test))]
mod gpa;
#[cfg(not(test))]
mod graphs;
#[cfg(not(test))]
mod msg;
#[cfg(not(test))]
mod nvml;
#[cfg(not(test))]
mod pools;
#[cfg(not(test))]
mod state;
#[cfg(not(test))]
mod symbols;
#[cfg(not(test))]
mod vmm;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Never unwind across FFI: there is no unwinder in this library at all.
    unsafe { libc::abort() }
}
