//! Container-level tests beyond the basic lifecycle: the interceptor working
//! inside a runc container with the fake driver (a
//! dynamic program under /etc/ld.so.preload in a rootfs without libgcc_s)
//! and malicious images.
#![allow(clippy::type_complexity)]
use gpu_quota_e2e::cuda::*;
use gpu_quota_e2e::*;
use std::path::Path;
use std::process::Command;

#[test]
fn interceptor_enforces_slice_inside_container() {
    require_e2e!();
    // allocations only: no context charge (the default "auto" charges one per process)
    let (h, b, libs) = cuda_host("cuda", "context_overhead = \"0\"");
    assert!(
        libs.iter()
            .all(|l| !l.to_string_lossy().contains("libgcc_s")),
        "{libs:?}"
    );
    let script = "cuda_probe info > /out/info 2>&1; cuda_probe alloc 3 2 > /out/alloc 2>/out/alloc_err; \
        (cuda_probe hold 3 5 > /out/hold &); sleep 1; cuda_probe alloc 2 > /out/second 2>&1; \
        find / -name 'libgcc_s*' -not -path '/proc/*' > /out/gcc; ls /run/gpu-quota > /out/state; touch /out/done";
    b.set(
        &[("vram", "4g")],
        script,
        &["FAKE_CUDA_MEM_BYTES=17179869184"],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "cuda"]),
        "run",
    );
    b.wait_out("done", 10).expect("probe ran");
    let read = |n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
    assert_eq!(read("gcc"), "", "image has no libgcc_s");
    assert!(
        read("info").contains(&format!("rc=0 total={}", 4 * GIB)),
        "cuMemGetInfo shows the slice: {}",
        read("info")
    );
    assert_eq!(
        read("alloc"),
        "alloc 3 GiB rc=0\nalloc 2 GiB rc=2\n",
        "over the slice: CUDA_ERROR_OUT_OF_MEMORY"
    );
    let err = read("alloc_err");
    assert!(
        err.contains("gpu-quota") && err.contains("4.00 GiB"),
        "one line naming the quota: {err}"
    );
    assert!(
        read("second").contains("alloc 2 GiB rc=2"),
        "another process shares the same budget: {}",
        read("second")
    );
    assert!(read("state").contains("usage"));
}

/// One grant from placement to enforcement: `vram=50%` over two GPUs of
/// different sizes is 8 GiB on the 16 GiB GPU and 4 GiB on the 8 GiB one
/// in the grant file, in what the interceptor shows and admits on each, and
/// in the driver-level limits the hook derives from the reservation. (The
/// old limits file carried the smallest slice, which the interceptor
/// enforced on every GPU: 4 GiB on both.)
#[test]
fn a_percentage_over_two_gpus_of_different_sizes_is_enforced_per_gpu() {
    require_e2e!();
    let (h, b, _) = cuda_host("pct", "context_overhead = \"0\"");
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    // GPU 1 has 8 GiB: the inventory's second entry
    let at = cfg.rfind("memory = \"16g\"").unwrap();
    let mut cfg2 = cfg.clone();
    cfg2.replace_range(at..at + "memory = \"16g\"".len(), "memory = \"8g\"");
    std::fs::write(h.config(), cfg2).unwrap();
    let script = "cuda_probe info > /out/info0; PROBE_DEVICE=1 cuda_probe info > /out/info1; \
        cuda_probe alloc 7 2 > /out/alloc0 2>&1; PROBE_DEVICE=1 cuda_probe alloc 3.5 1 > /out/alloc1 2>&1; \
        cat /run/gpu-quota/grant > /out/grant; touch /out/done; sleep 600";
    b.set(
        &[("vram", "50%"), ("gpus", "2")],
        script,
        &[
            "FAKE_CUDA_MEM_BYTES=17179869184,8589934592",
            "FAKE_CUDA_DEVICES=2",
        ],
    );
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "pct"]),
        "run",
    );
    b.wait_out("done", 10).expect("probe ran");
    let read = |n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
    // the grant, in the reservation's order (GPU 0, GPU 1)
    assert_eq!(out_grant(&b.out), [8 * GIB, 4 * GIB]);
    assert!(
        read("info0").contains(&format!("total={}", 8 * GIB)),
        "{}",
        read("info0")
    );
    assert!(
        read("info1").contains(&format!("total={}", 4 * GIB)),
        "{}",
        read("info1")
    );
    assert_eq!(
        read("alloc0")
            .lines()
            .filter(|l| l.starts_with("alloc"))
            .collect::<Vec<_>>(),
        ["alloc 7 GiB rc=0", "alloc 2 GiB rc=2"]
    );
    assert_eq!(
        read("alloc1")
            .lines()
            .filter(|l| l.starts_with("alloc"))
            .collect::<Vec<_>>(),
        ["alloc 3.5 GiB rc=0", "alloc 1 GiB rc=2"]
    );
    // the driver-level limits come from the same reservation, per GPU
    let r: gpuquota_core::Reservation = serde_json::from_value(h.reservations().remove(0)).unwrap();
    let limits = gpuquota_core::drvlimit::limits_of(&r);
    assert_eq!(
        limits
            .iter()
            .map(|g| (g.uuid.clone(), g.hard_bytes))
            .collect::<Vec<_>>(),
        [(fake_uuid(0), 8 * GIB), (fake_uuid(1), 4 * GIB)]
    );
    h.runtime(&["delete", "--force", "pct"]);
}

#[test]
fn context_overhead_from_the_config_is_charged_in_the_container() {
    require_e2e!();
    let (h, b, _) = cuda_host("ctx", "context_overhead = \"1g\"");
    b.set(
        &[("vram", "4g")],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits; cuda_probe info > /out/info; cuda_probe alloc 3.5 > /out/alloc 2>&1; touch /out/done",
        &["FAKE_CUDA_MEM_BYTES=17179869184"],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "ctx"]),
        "run",
    );
    b.wait_out("done", 10).expect("probe ran");
    let read = |n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
    assert!(
        read("limits").contains(&format!("context_overhead_bytes={GIB}")),
        "{}",
        read("limits")
    );
    assert!(
        read("info").contains(&format!("total={} free={}", 4 * GIB, 3 * GIB)),
        "the context's 1 GiB is in use: {}",
        read("info")
    );
    assert!(
        read("alloc").contains("alloc 3.5 GiB rc=2"),
        "3.5 GiB + 1 GiB context exceed 4 GiB: {}",
        read("alloc")
    );
}

/// Class 5: a usage file the container's own processes broke
/// (foreign magic, wrong size) made each new process fall back to a private
/// budget, so two processes each held most of one slice. In a container the
/// interceptor fails closed instead.
#[test]
fn interceptor_fails_closed_on_a_broken_usage_file() {
    require_e2e!();
    let (h, b, _) = cuda_host("broken-usage", "");
    // negative control first: with an intact usage file 3 GiB fits
    let script = "cuda_probe alloc 3 > /out/before 2>&1; \
        printf 'NOTOURS!' > /run/gpu-quota/usage; busybox dd if=/dev/zero bs=1024 count=300 >> /run/gpu-quota/usage 2>/dev/null; \
        cuda_probe alloc 3 > /out/a1 2>/out/a1err; cuda_probe alloc 3 > /out/a2 2>&1; touch /out/done";
    b.set(
        &[("vram", "4g")],
        script,
        &["FAKE_CUDA_MEM_BYTES=17179869184"],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "broken-usage"]),
        "run",
    );
    b.wait_out("done", 10).expect("probe ran");
    let read = |n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
    assert!(
        read("before").contains("alloc 3 GiB rc=0"),
        "control: {}",
        read("before")
    );
    // refused either at the context (its charge does not fit a budget of
    // nothing) or at the allocation; never granted from a private budget
    for n in ["a1", "a2"] {
        let out = read(n);
        assert!(
            !out.contains("rc=0") && (out.contains("init failed") || out.contains("rc=2")),
            "a broken usage file must refuse, not fall back to a private budget: {n}: {out}"
        );
    }
    let err = read("a1err");
    assert!(
        err.contains("gpu-quota") && err.contains("/run/gpu-quota/usage"),
        "one line naming the usage file: {err}"
    );
}

/// With the default `context_overhead = "auto"` the hook measures
/// the context once (fake driver: 300 MiB seen only through NVML's
/// per-process query), caches it, and charges it + the 96 MiB margin.
#[test]
fn context_cost_is_measured_and_charged_by_default() {
    require_e2e!();
    let (h, b, _) = cuda_host("ctxauto", "");
    let script =
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits; cuda_probe info > /out/info; touch /out/done";
    let charge = (300 + 96) << 20;
    for round in 0..2 {
        let _ = std::fs::remove_file(b.out.join("done"));
        b.set(
            &[("vram", "4g")],
            script,
            &["FAKE_CUDA_MEM_BYTES=17179869184"],
        );
        assert_ok(
            &h.runtime(&[
                "run",
                "--bundle",
                &b.bundle_arg(),
                &format!("ctxauto{round}"),
            ]),
            "run",
        );
        b.wait_out("done", 10).expect("probe ran");
        let read = |n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
        assert!(
            read("limits").contains(&format!("context_overhead_bytes={charge}\n")),
            "round {round}: {}",
            read("limits")
        );
        assert!(
            read("info").contains(&format!("total={} free={}", 4 * GIB, 4 * GIB - charge)),
            "the measured context is in use from the start: {}",
            read("info")
        );
    }
    let cache = h.path().join("ledger/context-cost.json");
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(text.contains("\"context_bytes\": 314572800"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o644
    );
}

/// Without a usable measurement (here: the inventory names a GPU the
/// driver does not have) "auto" is the documented built-in default, not 0.
#[test]
fn context_cost_falls_back_to_the_builtin_default() {
    require_e2e!();
    let (h, b, _) = cuda_host("ctxdef", "");
    // the inventory names a GPU the fake driver does not have
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    std::fs::write(h.config(), cfg.replace(&fake_uuid(0), &uuid(0))).unwrap();
    b.set(
        &[("vram", "4g")],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits; touch /out/done",
        &[],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "ctxdef"]),
        "run",
    );
    b.wait_out("done", 10).expect("ran");
    let limits = std::fs::read_to_string(b.out.join("limits")).unwrap();
    assert!(
        limits.contains(&format!(
            "context_overhead_bytes={}\n",
            gpuquota_core::ctxcost::BUILTIN_DEFAULT_BYTES
        )),
        "{limits}"
    );
}

/// Once the hook has set a driver limit on this host (r615+), a foreground
/// `run` goes through `runc run --keep` so the runtime can clear the limit
/// while the cgroup still exists, then deletes the container itself: the
/// exit code, the release and the removal must be as without it.
#[test]
fn foreground_run_with_driver_limits_active_keeps_then_deletes() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    std::fs::write(
        h.path()
            .join("ledger")
            .join(gpuquota_core::drvlimit::ACTIVE_MARKER),
        b"",
    )
    .unwrap();
    let b = h.bundle("keep");
    b.set(&[("vram", "4g")], "touch /out/done; exit 3", &[]);
    let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "keep1"]);
    assert_eq!(o.status.code(), Some(3), "exit code kept: {}", stderr(&o));
    assert!(b.out.join("done").exists());
    assert!(h.reservations().is_empty(), "{:?}", h.reservations());
    let l = h.runc(&["list", "-q"]);
    assert!(
        !String::from_utf8_lossy(&l.stdout).contains("keep1"),
        "the kept container was deleted: {}",
        String::from_utf8_lossy(&l.stdout)
    );
    assert!(
        !h.path().join("state/containers").exists()
            || std::fs::read_dir(h.path().join("state/containers"))
                .unwrap()
                .next()
                .is_none(),
        "state directory removed"
    );
}

#[test]
fn malicious_images_cannot_touch_the_host() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let hostdir = h.path().join("host-secrets");
    std::fs::create_dir_all(&hostdir).unwrap();
    std::fs::write(hostdir.join("ld.so.preload"), b"HOST FILE\n").unwrap();
    std::fs::write(hostdir.join("nvidia-smi"), b"HOST BIN\n").unwrap();
    let snapshot = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into(),
                    std::fs::read(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&hostdir);
    let host_mounts = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains("host-secrets"))
            .count()
    };

    let cases: Vec<(&str, Box<dyn Fn(&Path)>, Option<&str>)> = vec![
        (
            "etc-abs",
            Box::new(|r: &Path| std::os::unix::fs::symlink(&hostdir, r.join("etc")).unwrap()),
            Some("/etc"),
        ),
        (
            "preload-abs",
            Box::new(|r: &Path| {
                std::fs::create_dir_all(r.join("etc")).unwrap();
                std::os::unix::fs::symlink(
                    hostdir.join("ld.so.preload"),
                    r.join("etc/ld.so.preload"),
                )
                .unwrap();
            }),
            Some("/etc/ld.so.preload"),
        ),
        (
            "usr-bin-abs",
            Box::new(|r: &Path| {
                std::fs::create_dir_all(r.join("usr")).unwrap();
                std::os::unix::fs::symlink(&hostdir, r.join("usr/bin")).unwrap();
            }),
            Some("/usr/bin"),
        ),
        // `..` climbs stop at the rootfs: this lands inside the image, safely
        (
            "run-dotdot",
            Box::new(|r: &Path| {
                let rel = format!("../../../../../../../../..{}", hostdir.display());
                std::fs::create_dir_all(r.join(hostdir.strip_prefix("/").unwrap())).unwrap();
                std::os::unix::fs::symlink(rel, r.join("run")).unwrap();
            }),
            None,
        ),
    ];
    for (name, setup, refused_path) in &cases {
        let b = h.bundle(name);
        setup(&b.rootfs());
        b.set(
            &[("vram", "1g")],
            "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits",
            &[],
        );
        let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), name]);
        match refused_path {
            Some(p) => {
                assert!(!o.status.success(), "{name} must be refused");
                let e = stderr(&o);
                assert!(
                    e.contains(p) && e.contains("symlink"),
                    "{name}: clear message naming {p}: {e}"
                );
            }
            None => {
                assert_ok(&o, name);
                assert!(b.wait_out("limits", 2).unwrap().contains("container_id="));
                assert!(
                    b.rootfs()
                        .join(hostdir.strip_prefix("/").unwrap())
                        .join("gpu-quota")
                        .is_dir(),
                    "{name}: mount point inside the image"
                );
            }
        }
        assert_eq!(
            snapshot(&hostdir),
            before,
            "{name}: host directory untouched"
        );
        assert_eq!(host_mounts(), 0, "{name}: nothing mounted on the host");
        assert!(h.reservations().is_empty(), "{name}: slice released");
    }

    // the image's environment never reaches the hook (or ldconfig)
    let evil = h.path().join("evil.so");
    cc("evil.c", &evil, &["-shared", "-fPIC"]);
    let marker = h.path().join("evil-loaded");
    let b = h.bundle("evil-env");
    b.set(
        &[("vram", "1g")],
        "echo started > /out/started",
        &[
            &format!("LD_PRELOAD={}", evil.display()),
            &format!("EVIL_MARKER={}", marker.display()),
        ],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "evil-env"]),
        "evil env",
    );
    assert_eq!(b.wait_out("started", 2).as_deref(), Some("started\n"));
    assert!(
        !marker.exists(),
        "the image's LD_PRELOAD was loaded by a privileged process"
    );
    // the marker library does work when preloaded: the check above can fail
    let o = Command::new("/bin/true")
        .env("LD_PRELOAD", &evil)
        .env("EVIL_MARKER", &marker)
        .status()
        .unwrap();
    assert!(o.success() && marker.exists());
}
