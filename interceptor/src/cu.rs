//! The driver's ABI as every layer sees it: result codes and the handful of
//! enum values the bookkeeping passes to the driver. Types only; nothing
//! here calls anything.

use libc::c_int;

pub type CUresult = c_int;
pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
/// "The MPS client failed to connect to the MPS control daemon or the MPS
/// server": what a host-root process in a container whose share is
/// another user's gets at cuInit (the compute-share client settings).
pub const CUDA_ERROR_MPS_CONNECTION_FAILED: CUresult = 805;
/// "The hardware resources required to create MPS client have been
/// exhausted": what a process beyond the CUDA processes its container's
/// compute share is split over (`sm-procs=`) gets at cuInit.
pub const CUDA_ERROR_MPS_MAX_CLIENTS_REACHED: CUresult = 808;

/// CUmemLocationType: a device (pools, VMM, graph memory nodes).
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
