//! libgpuquota.so — LD_PRELOAD CUDA/NVML memory-quota interceptor.
//!
//! `#![no_std]`, `panic = "abort"`, only the `libc` crate: the resulting
//! shared object needs nothing but libc.so.6 and libdl.so.2, so it can sit in
//! `/etc/ld.so.preload` of any glibc image. See docs/interceptor.md.
#![cfg_attr(not(test), no_std)]
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

// The layers, lowest first (tests/layers.rs holds the floors and checks
// that every import goes down): the ABI (driver types, real entry points,
// libc, parsing) -> the policy (admission over the usage region) -> the
// process's state and books -> bookkeeping (captures, graph memory, pools,
// VMM, contexts) -> the CUDA/NVML entry points -> the exported table,
// cuGetProcAddress and dlsym. Only the entry points are left out of the
// std test harness (they export the driver's symbols and dlsym).
pub mod config;
pub mod cu;
pub mod fmt;
pub mod hooks;
pub mod ptrtable;
mod slotgroup;
pub mod sys;

pub mod livegrant;
pub mod msg;
pub mod region;
pub mod symbols;

pub mod policy;

pub mod state;

pub mod mpsslots;

pub mod foreign;
pub mod mpsclient;
pub mod mpsguard;

pub mod devices;

pub mod account;

pub mod capture;

pub mod graphs;

pub mod pools;
pub mod vmm;

pub mod contexts;

#[cfg(not(test))]
mod cuda;
#[cfg(not(test))]
mod nvml;

#[cfg(not(test))]
mod exports;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Never unwind across FFI: there is no unwinder in this library at all.
    unsafe { libc::abort() }
}
