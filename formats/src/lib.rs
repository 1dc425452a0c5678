//! The formats that the host (gpu-quota-runtime, gpu-quota-hook, the
//! `gpu-quota` CLI, the device plugin) and the container (libgpuquota.so)
//! share, each defined once:
//!
//! * [`grant`] — what a container holds on each GPU, as one value from
//!   placement to enforcement, and the `grant` file with its live limit;
//! * [`size`] — the size grammar (`8g`, `8GiB`, `8GB`, `1.5g`, `25%`), for
//!   requests, the host configuration and the interceptor's environment;
//! * [`keys`] — the request keys (annotations and environment variables);
//! * [`limits`] — the `limits` file in a container's state directory: its
//!   one writer (the hook) and its one reader (the interceptor);
//! * [`usage`] — the binary layout of the `usage` file
//!   (interceptor/include/gpuquota_usage.h is checked against it by
//!   `tests/usage_header.rs`);
//! * [`ctxcost`] — the context charge's figures and the host's cache file
//!   that the interceptor reads when it runs standalone;
//! * [`layout`] — the container's gpu-quota directory and the host's default
//!   locations;
//! * [`helper`] — the command line of the host's helper child
//!   (gpu-quota-driver);
//! * [`names`] — the hash in on-disk names;
//! * [`mps`] — a compute share's MPS client settings.
//!
//! Each constant that more than one crate spells lives here once;
//! `tests/one_owner.rs` fails on a literal copy anywhere else.
//!
//! `#![no_std]`, no dependencies, no allocation, no floating point: the
//! interceptor links it into a `no_std` cdylib that needs only libc.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

pub mod ctxcost;
pub mod grant;
pub mod helper;
pub mod keys;
pub mod layout;
pub mod limits;
pub mod mps;
pub mod names;
pub mod size;
pub mod usage;
