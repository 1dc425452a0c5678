//! gpu-quota core: everything the runtime shim, the OCI hook and the
//! operator CLI share. Pure planning lives here; effects (mounts, writes,
//! exec) are behind small traits so planning is unit-tested without root.
pub mod burst;
pub mod claims;
pub mod config;
pub mod ctxcost;
pub mod dl;
pub mod drvlimit;
pub mod fsutil;
pub mod grantfile;
pub mod helper;
pub mod inventory;
pub mod ldcache;
pub mod ledger;
pub mod lifecycle;
pub mod placement;
pub mod procmem;
pub mod request;
pub mod units;

/// The formats shared with libgpuquota.so (size grammar, request keys,
/// the limits file, the usage layout), defined once in gpu-quota-formats.
pub use gpuquota_formats as formats;

pub use config::Config;
pub use inventory::{Gpu, Inventory};
pub use ledger::{Ledger, LedgerError, Reservation};
pub use request::{Request, RequestError};
pub mod counters;
pub mod devices;
pub mod driver;
pub mod events;
pub mod mountplan;
pub mod mps;
pub mod out;
pub mod paths;
pub mod rootfs;
pub mod spec;
pub mod state;
pub mod toolkit;
pub mod usage;
pub mod workload;

/// In the static musl build of gpu-quota-runtime and gpu-quota-hook (`make
/// build`; both link this crate, and nothing else is built for musl),
/// dlmalloc: musl's allocator returns freed memory to the kernel at once
/// (an munmap and fresh page faults for every large buffer), which costs a
/// start more than the allocations themselves.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
