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
    // a share's process runs as an MPS client or not at all; a process
    // refused here gives its place among the share's clients back
    if let Err(e) = crate::mpsguard::before_init() {
        crate::mpsclient::initialised(e);
        return e;
    }
    let r = f(flags);
    if r != CUDA_SUCCESS {
        crate::mpsclient::initialised(r);
        return r;
    }
    let r = crate::mpsguard::after_init(r);
    crate::mpsclient::initialised(r);
    r
}
