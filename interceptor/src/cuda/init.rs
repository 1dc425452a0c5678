//! cuInit: the one moment the driver reads a process's MPS settings
//! (crate::mpsclient), and where a share's process is made an MPS client
//! or refused (crate::mpsguard).

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    type F = unsafe extern "C" fn(c_uint) -> CUresult;
    let f = real_or!(S::cuInit, F);
    if let Err(e) = crate::mpsclient::impose() {
        return e;
    }
    // a share's process runs as an MPS client or not at all
    if let Err(e) = crate::mpsguard::before_init() {
        return e;
    }
    let r = f(flags);
    if r != CUDA_SUCCESS {
        return r;
    }
    crate::mpsguard::after_init(r)
}
