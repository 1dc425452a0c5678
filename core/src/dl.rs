//! The one dlopen wrapper: a host library loaded by its host path
//! (`RTLD_NOW | RTLD_LOCAL`), its symbols looked up by name. Used by
//! `drvlimit::detect_at` (doctor, ls: is the r615 call there?) and by
//! gpu-quota-driver's helper stages (hook/src/driver/stages.rs,
//! hook/src/driver/nvml_limits.rs), which own the driver calls themselves. Never unloaded: a driver library
//! does not support dlclose.
use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

/// A statically linked binary (`make build` links gpu-quota-runtime and
/// gpu-quota-hook so, against musl or glibc): no `dlopen` in this process.
pub const STATIC: bool = cfg!(target_feature = "crt-static");

pub struct Lib {
    handle: *mut c_void,
    path: PathBuf,
}

impl Lib {
    /// Load `path`; Err carries dlerror's message. A statically linked
    /// binary (gpu-quota-runtime, gpu-quota-hook) never loads a library: its
    /// driver work goes through gpu-quota-driver, a helper child.
    pub fn open(path: &Path) -> Result<Lib, String> {
        if STATIC {
            return Err(format!(
                "{}: not loaded, this binary is statically linked",
                path.display()
            ));
        }
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| "NUL in path".to_string())?;
        // SAFETY: dlopen with a valid C string.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a C string or NULL.
            let m = unsafe { libc::dlerror() };
            return Err(if m.is_null() {
                "dlopen failed".into()
            } else {
                // SAFETY: non-null C string from dlerror.
                unsafe { CStr::from_ptr(m) }.to_string_lossy().into_owned()
            });
        }
        Ok(Lib {
            handle: h,
            path: path.into(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The address of `name`, if the library has it.
    pub fn sym(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: valid handle and name.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_a_library_and_finds_its_symbols() {
        let libc_so = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("a libc.so.6");
        let l = Lib::open(libc_so).unwrap();
        assert!(l.sym("getpid").is_some());
        assert!(l.sym("no_such_symbol_gq").is_none());
        assert_eq!(l.path(), libc_so);
        let e = Lib::open(Path::new("/nonexistent/libx.so")).err().unwrap();
        assert!(e.contains("/nonexistent/libx.so"), "{e}");
    }
}
