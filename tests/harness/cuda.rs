//! Hosts whose driver is the fake one from tests/fake and whose interceptor
//! is the real libgpuquota.so, with bundles holding a CUDA probe program
//! (tests/e2e/cuda_probe.c) and exactly the libraries it needs.
use crate::*;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// Copy a host library into the rootfs at the same path.
pub fn copy_lib(rootfs: &Path, lib: &Path) {
    let dst = rootfs.join(lib.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(std::fs::canonicalize(lib).unwrap(), &dst).unwrap();
}

pub fn ldd_libs(bin: &Path) -> Vec<PathBuf> {
    let o = Command::new("ldd").arg(bin).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect()
}

/// A host whose driver is the fake one from tests/fake and whose
/// interceptor is the real libgpuquota.so, and a bundle with a minimal
/// glibc image: a CUDA probe program, the loader and exactly the libraries
/// needed (no libgcc_s). Returns the libraries copied into the image.
/// The UUID the fake driver (tests/fake) reports for its GPU `i`.
pub fn fake_uuid(i: u32) -> String {
    format!("GPU-face3344-5566-7788-99aa-bbccddeeff{i:02x}")
}

pub fn cuda_host(name: &str, extra_config: &str) -> (Host, Bundle, Vec<PathBuf>) {
    let so = repo().join("interceptor/target/release/libgpuquota.so");
    let fake = repo().join("tests/fake/build");
    assert!(
        so.is_file() && fake.join("libcuda.so.1").is_file(),
        "build first: make build-debug && make -C tests/fake"
    );
    let h = Host::new(HostOpts {
        lib_dir: Some(fake.clone()),
        interceptor: Some(so.clone()),
        extra_config: extra_config.into(),
        ..HostOpts::default()
    });
    // the inventory's GPUs are the fake driver's GPUs 0 and 1, by UUID, as
    // NVML and the driver agree on a real host (the interceptor gives a GPU
    // whose UUID is not in the slice nothing)
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    std::fs::write(
        h.config(),
        cfg.replace(&uuid(0), &fake_uuid(0))
            .replace(&uuid(1), &fake_uuid(1)),
    )
    .unwrap();
    let b = h.bundle(name);
    let rootfs = b.rootfs();
    let probe = rootfs.join("bin/cuda_probe");
    cc("cuda_probe.c", &probe, &["-ldl"]);
    let mut libs = ldd_libs(&probe);
    libs.extend(ldd_libs(&so));
    libs.extend(ldd_libs(&fake.join("libcuda.so.1")));
    libs.sort();
    libs.dedup();
    for l in &libs {
        copy_lib(&rootfs, l);
    }
    (h, b, libs)
}

/// Give host `h` (from [`cuda_host`]) a private copy of the fake driver's
/// libraries with the fake GPU's registry beside them (fake-gpu-registry,
/// a link to `registry`, created empty), and point its config there: the
/// host's own tools (the driver helper runs with an empty environment)
/// then see the same device memory as the containers that write
/// `registry`, as on a real host the driver knows every process. Returns
/// the libraries' directory.
pub fn private_fake_driver(h: &Host, registry: &Path) -> PathBuf {
    let fake = repo().join("tests/fake/build");
    let lib = h.path().join("fakelib");
    std::fs::create_dir(&lib).unwrap();
    for f in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        std::fs::copy(fake.join(f), lib.join(f)).unwrap();
    }
    std::fs::write(registry, b"").unwrap();
    std::os::unix::fs::symlink(registry, lib.join("fake-gpu-registry")).unwrap();
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    let from = format!("lib_dirs = [\"{}\"]", fake.display());
    assert!(cfg.contains(&from), "{cfg}");
    std::fs::write(
        h.config(),
        cfg.replace(&from, &format!("lib_dirs = [\"{}\"]", lib.display())),
    )
    .unwrap();
    lib
}
