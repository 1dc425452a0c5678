//! Helpers of the untrusted-image e2e tests (tests/e2e/untrusted_*.rs):
//! a host with ELF driver libraries, a glibc image, FIFOs, a hook script in a
//! bundle, the operator CLI against a host.
use crate::*;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn fake_driver_dir() -> PathBuf {
    let d = repo_dir().join("tests/fake/build");
    assert!(
        d.join("libcuda.so.1").is_file(),
        "build first: make -C tests/fake"
    );
    d
}

/// A host whose driver libraries are real ELF files (the fake driver), so
/// glibc images get a loader cache.
pub fn elf_host(extra_config: &str) -> Host {
    Host::new(HostOpts {
        lib_dir: Some(fake_driver_dir()),
        extra_config: extra_config.into(),
        ..HostOpts::default()
    })
}

/// Make the bundle's image a glibc image (it has the dynamic loader; the
/// container's programs stay static busybox).
pub fn glibc_image(b: &Bundle) {
    let r = b.rootfs();
    std::fs::create_dir_all(r.join("lib64")).unwrap();
    std::fs::copy(
        std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2").unwrap(),
        r.join("lib64/ld-linux-x86-64.so.2"),
    )
    .unwrap();
}

pub fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

pub fn set_hook(b: &Bundle, stage: &str, script: &Path) {
    let mut c = b.config();
    c["hooks"] = serde_json::json!({ stage: [{"path": script.to_str().unwrap(), "timeout": 20}] });
    b.write_config(&c);
}

pub fn gq(h: &Host, args: &[&str]) -> std::process::Output {
    let mut c = Command::new("timeout");
    c.arg("20")
        .arg(bin("gpu-quota"))
        .env("GPU_QUOTA_CONFIG", h.config())
        .args(args);
    capture(c)
}
