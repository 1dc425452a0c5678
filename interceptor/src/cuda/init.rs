//! cuInit: the one moment the driver reads a process's MPS settings
//! (crate::mpsclient).

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    type F = unsafe extern "C" fn(c_uint) -> CUresult;
    let f = real_or!(S::cuInit, F);
    if let Err(e) = crate::mpsclient::impose() {
        return e;
    }
    let r = f(flags);
    crate::mpsclient::initialised(r);
    r
}
