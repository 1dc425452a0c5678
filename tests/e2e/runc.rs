//! Admission, devices, mounts,
//! limits, release, refusals, pass-through, concurrency, malicious images.
#![allow(clippy::type_complexity)]
use gpu_quota_e2e::*;
use serde_json::Value;

const PROBE: &str = "ls /dev > /out/dev; cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits; cat /etc/ld.so.preload > /out/preload; \
    ls /run/gpu-quota/driver > /out/libs; readlink /run/gpu-quota/driver/libcuda.so.1 > /out/link; \
    nvidia-smi > /out/smi 2>&1; (echo x > /run/gpu-quota/limits) 2>/out/limits_write; echo ok > /run/gpu-quota/usage && echo rw > /out/usage_rw; \
    cat /proc/self/mounts > /out/mounts; touch /out/done; sleep 600";

#[test]
fn harness_runs_plain_runc() {
    require_e2e!();
    // The harness's bundle runs under plain runc: proves the harness, not gpu-quota.
    let h = Host::new(HostOpts::default());
    let b = h.bundle("plain");
    b.set(&[], "echo hello > /out/hello", &[]);
    assert_ok(
        &h.runc(&["run", "--bundle", &b.bundle_arg(), "plain"]),
        "runc run",
    );
    assert_eq!(b.wait_out("hello", 5).as_deref(), Some("hello\n"));
    // The same request under plain runc gets none of what slice_lifecycle
    // checks: those checks observe gpu-quota, not the harness.
    let b = h.bundle("plain-req");
    b.set(&[("vram", "4g")], "ls /dev > /out/dev; cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits 2>&1; test -e /etc/ld.so.preload || echo none > /out/preload; touch /out/done", &[]);
    assert_ok(
        &h.runc(&["run", "--bundle", &b.bundle_arg(), "plain-req"]),
        "runc run",
    );
    b.wait_out("done", 5).unwrap();
    assert!(!std::fs::read_to_string(b.out.join("dev"))
        .unwrap()
        .contains("nvidia"));
    assert!(!std::fs::read_to_string(b.out.join("limits"))
        .unwrap()
        .contains("vram_bytes"));
    assert_eq!(
        std::fs::read_to_string(b.out.join("preload")).unwrap(),
        "none\n"
    );
    assert!(h.reservations().is_empty());
}

#[test]
fn slice_lifecycle() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("c1");
    b.set(&[("vram", "4g")], PROBE, &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "c1"]),
        "create",
    );
    let r = h.reservations();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        r[0]["state"], "running",
        "the hook confirmed it with the pid"
    );
    assert_eq!(r[0]["slices"][0]["bytes"], 4 * GIB);
    assert_ok(&h.runtime(&["start", "c1"]), "start");
    let dirs: Vec<String> = std::fs::read_dir(h.path().join("state/containers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        dirs.len() == 1 && dirs[0].starts_with("c1-"),
        "one state dir, named by id and bundle: {dirs:?}"
    );
    b.wait_out("done", 20).expect("container ran its probe");
    let dev = std::fs::read_to_string(b.out.join("dev")).unwrap();
    let gpu = r[0]["slices"][0]["index"].as_u64().unwrap();
    let other = 1 - gpu;
    assert!(dev.contains(&format!("nvidia{gpu}\n")), "{dev}");
    assert!(
        !dev.contains(&format!("nvidia{other}\n")),
        "only its own GPU: {dev}"
    );
    for n in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
        assert!(dev.lines().any(|l| l == n), "{n} in {dev}");
    }
    let limits = std::fs::read_to_string(b.out.join("limits")).unwrap();
    assert_eq!(out_grant(&b.out), [4 * GIB], "{limits}");
    assert!(
        limits.contains(&format!("gpus={}\n", uuid(gpu as u32))),
        "{limits}"
    );
    assert_eq!(
        std::fs::read_to_string(b.out.join("preload")).unwrap(),
        "/run/gpu-quota/libgpuquota.so\n"
    );
    let libs = std::fs::read_to_string(b.out.join("libs")).unwrap();
    for l in [
        "libcuda.so.1",
        "libcuda.so.580.1",
        "libnvidia-ml.so.1",
        "libnvidia-ml.so.580.1",
    ] {
        assert!(libs.lines().any(|x| x == l), "{l} in {libs}");
    }
    assert_eq!(
        std::fs::read_to_string(b.out.join("link")).unwrap(),
        "libcuda.so.580.1\n"
    );
    assert!(std::fs::read_to_string(b.out.join("smi"))
        .unwrap()
        .contains("fake nvidia-smi"));
    assert!(
        std::fs::read_to_string(b.out.join("limits_write"))
            .unwrap()
            .contains("Read-only"),
        "limits are read-only"
    );
    assert_eq!(
        std::fs::read_to_string(b.out.join("usage_rw")).unwrap(),
        "rw\n",
        "usage is writable"
    );
    let mounts = std::fs::read_to_string(b.out.join("mounts")).unwrap();
    let preload_mount = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some("/etc/ld.so.preload"))
        .expect("preload mounted");
    assert!(
        preload_mount
            .split(' ')
            .nth(3)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{preload_mount}"
    );
    // the image's own layer got no preload content: it is a mount
    assert_eq!(
        std::fs::read(b.rootfs().join("etc/ld.so.preload")).unwrap(),
        b""
    );
    assert_ok(&h.runtime(&["kill", "c1", "KILL"]), "kill");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_ok(&h.runtime(&["delete", "c1"]), "delete");
    assert!(h.reservations().is_empty(), "released on delete");
    let left: Vec<_> = std::fs::read_dir(h.path().join("state/containers"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "state dir removed: {left:?}");
}

#[test]
fn refusal_and_placement() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    for id in ["a", "b"] {
        let b = h.bundle(id);
        b.set(&[("vram", "8g"), ("gpu", "0")], "sleep 600", &[]);
        assert_ok(
            &h.runtime(&["create", "--bundle", &b.bundle_arg(), id]),
            "create",
        );
    }
    let before = h.ledger_bytes();
    let c = h.bundle("c");
    c.set(&[("vram", "8g"), ("gpu", "0")], "sleep 600", &[]);
    let cfg_before = std::fs::read(c.config_path()).unwrap();
    let log = h.path().join("log.json");
    let o = h.runtime(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "create",
        "--bundle",
        &c.bundle_arg(),
        "c",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("requested 8.00 GiB")
            && e.contains("GPU 0")
            && e.contains("only 0 B")
            && e.contains("GPU 1: 16.00 GiB"),
        "{e}"
    );
    assert_eq!(h.ledger_bytes(), before, "ledger unchanged");
    assert_eq!(
        std::fs::read(c.config_path()).unwrap(),
        cfg_before,
        "bundle unchanged"
    );
    let logged: Value = serde_json::from_str(
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(logged["level"], "error");
    assert!(
        logged["msg"]
            .as_str()
            .unwrap()
            .contains("requested 8.00 GiB"),
        "runc-format log for engines"
    );
    assert!(
        h.runc(&["state", "c"]).status.code() != Some(0),
        "no container was created"
    );
    // without gpu=, placement puts it on the other GPU
    c.set(&[("vram", "8g")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &c.bundle_arg(), "c"]),
        "create unpinned",
    );
    let r = h.reservations();
    let rc = r.iter().find(|x| x["container_id"] == "c").unwrap();
    assert_eq!(rc["slices"][0]["index"], 1);
    assert_eq!(c.config()["annotations"]["gpu-quota.io/assigned"], uuid(1));
    // the hook's hint: the file name of this container's own ledger record
    let hint = c.config()["annotations"]["gpu-quota.io/record"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        h.ledger_records()
            .iter()
            .any(|p| p.file_name().unwrap().to_str() == Some(hint.as_str())
                && std::fs::read_to_string(p)
                    .unwrap()
                    .contains("\"container_id\":\"c\"")),
        "{hint} names c's record"
    );
    let devs = c.config()["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(
        devs.contains(&"/dev/nvidia1".to_string()) && !devs.contains(&"/dev/nvidia0".to_string()),
        "{devs:?}"
    );
    for id in ["a", "b", "c"] {
        assert_ok(&h.runtime(&["delete", "--force", id]), "delete");
    }
    assert!(h.reservations().is_empty());
}

#[test]
fn malformed_requests_have_no_side_effect() {
    require_e2e!();
    // env requests on, so that a malformed one is refused (not ignored)
    let h = Host::new(HostOpts {
        extra_config: "env_requests = true".into(),
        ..HostOpts::default()
    });
    // one admitted container so the ledger exists and must stay byte-identical
    let ok = h.bundle("ok");
    ok.set(&[("vram", "1g")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &ok.bundle_arg(), "ok"]),
        "create",
    );
    let ledger = h.ledger_bytes().unwrap();
    let cases: &[(&[(&str, &str)], &[&str], &str)] = &[
        (&[("vram", "")], &[], "empty value"),
        (&[("vram", "0")], &[], "zero"),
        (&[("vram", "-1g")], &[], "negative"),
        (&[("vram", "NaN")], &[], "not a number"),
        (&[("vram", "18446744073709551616")], &[], "64 bits"),
        (&[("vram", "4zb")], &[], "unknown unit"),
        (&[("vram", "17g")], &[], "larger than"),
        (&[("vram", "1g"), ("gpu", "7")], &[], "does not have"),
        (
            &[("vram", "1g"), ("gpu", "GPU-deadbeef")],
            &[],
            "does not have",
        ),
        (&[("vram", "1g"), ("gpu", "0,0")], &[], "listed twice"),
        (
            &[("vram", "1g"), ("gpu", "0"), ("gpus", "2")],
            &[],
            "contradicts",
        ),
        (
            &[("vram", "1g"), ("gpus", "3")],
            &[],
            "only 2 may be sliced",
        ),
        (
            &[(
                "vram",
                "99999999999999999999999999999999999999999999999999999999999999999999g",
            )],
            &[],
            "longer than",
        ),
        (
            &[],
            &["GPU_QUOTA_VRAM=lots"],
            "environment variable GPU_QUOTA_VRAM",
        ),
        (&[("gpu", "1")], &[], "without a memory slice"),
    ];
    for (i, (ann, env, want)) in cases.iter().enumerate() {
        let id = format!("bad{i}");
        let b = h.bundle(&id);
        b.set(ann, "true", env);
        let cfg = std::fs::read(b.config_path()).unwrap();
        let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), &id]);
        let e = stderr(&o);
        assert!(!o.status.success(), "{ann:?} {env:?} must be refused");
        assert!(e.contains(want), "{ann:?}: {e}");
        assert!(e.starts_with("gpu-quota: "), "{e}");
        assert_eq!(
            std::fs::read(b.config_path()).unwrap(),
            cfg,
            "{ann:?}: bundle untouched"
        );
        assert_eq!(
            h.ledger_bytes().unwrap(),
            ledger,
            "{ann:?}: ledger untouched"
        );
    }
    // non-UTF-8 inside config.json: never fails open
    let b = h.bundle("nonutf8");
    let mut raw = std::fs::read(b.config_path()).unwrap();
    let pos = raw.windows(9).position(|w| w == b"\"process\"").unwrap();
    raw.splice(
        pos..pos,
        b"\"annotations\": {\"vram\": \"4\xff\xfeg\"},\n"
            .iter()
            .copied(),
    );
    std::fs::write(b.config_path(), &raw).unwrap();
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), "nonutf8"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not valid JSON"), "{}", stderr(&o));
    assert_eq!(std::fs::read(b.config_path()).unwrap(), raw);
    assert_eq!(h.ledger_bytes().unwrap(), ledger);
    assert_ok(&h.runtime(&["delete", "--force", "ok"]), "delete");
}

#[test]
fn no_request_passes_through_untouched() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("plain-gq");
    b.set(
        &[("unrelated", "x")],
        "ls /dev > /out/dev; test -e /etc/ld.so.preload || echo none > /out/preload",
        &["OTHER=1"],
    );
    let before = std::fs::read(b.config_path()).unwrap();
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "plain-gq"]),
        "run",
    );
    assert_eq!(
        std::fs::read(b.config_path()).unwrap(),
        before,
        "config.json byte-identical"
    );
    assert_eq!(
        b.wait_out("preload", 5).as_deref(),
        Some("none\n"),
        "no hook ran"
    );
    assert!(!std::fs::read_to_string(b.out.join("dev"))
        .unwrap()
        .contains("nvidia"));
    assert!(h.ledger_bytes().is_none(), "no ledger touched");
    assert!(!h.path().join("state/containers").exists());
}

#[test]
fn foreground_run_releases_on_exit() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("fg");
    b.set(
        &[("gpu-quota.io/vram", "2g")],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits",
        &[],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "fg"]),
        "run",
    );
    b.wait_out("limits", 1).unwrap();
    assert_eq!(out_grant(&b.out), [2 * GIB]);
    assert!(h.reservations().is_empty());
}

#[test]
fn env_fallback() {
    require_e2e!();
    // only where the host allows env requests (Docker < 24 installs)
    let h = Host::new(HostOpts {
        extra_config: "env_requests = true".into(),
        ..HostOpts::default()
    });
    let b = h.bundle("env");
    b.set(
        &[],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits",
        &["GPU_QUOTA_VRAM=3g", "GPU_QUOTA_GPU=1"],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "env"]),
        "run",
    );
    let l = b.wait_out("limits", 1).unwrap();
    assert!(
        out_grant(&b.out) == [3 * GIB] && l.contains(&uuid(1)),
        "{l}"
    );
}

#[test]
fn parallel_creates_admit_exactly_what_fits() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let n = 40;
    let bundles: Vec<Bundle> = (0..n)
        .map(|i| {
            let b = h.bundle(&format!("p{i}"));
            b.set(&[("vram", "1g")], "sleep 600", &[]);
            b
        })
        .collect();
    let children: Vec<_> = bundles
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let id = format!("p{i}");
            let args = ["create", "--bundle", &b.bundle_arg(), &id].map(String::from);
            let mut c = h.runtime_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>());
            c.stdout(std::process::Stdio::null());
            std::thread::spawn(move || capture(c))
        })
        .collect();
    let outs: Vec<_> = children.into_iter().map(|c| c.join().unwrap()).collect();
    let ok = outs.iter().filter(|o| o.status.success()).count();
    let refused: Vec<String> = outs
        .iter()
        .filter(|o| !o.status.success())
        .map(stderr)
        .collect();
    assert_eq!(
        ok, 32,
        "exactly 32 × 1 GiB fit on 2 × 16 GiB; refusals: {refused:?}"
    );
    assert_eq!(refused.len(), 8);
    assert!(
        refused
            .iter()
            .all(|e| e.contains("no 1 GPU(s) have that much free")),
        "{refused:?}"
    );
    let r = h.reservations();
    assert_eq!(r.len(), 32);
    for g in 0..2u64 {
        let sum: u64 = r
            .iter()
            .flat_map(|x| x["slices"].as_array().unwrap().clone())
            .filter(|s| s["index"] == g)
            .map(|s| s["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, 16 * GIB, "GPU {g} exactly full");
    }
    let created = String::from_utf8_lossy(&h.runc(&["list", "-q"]).stdout)
        .lines()
        .count();
    assert_eq!(
        created, 32,
        "every admitted container exists, no refused one does"
    );
    h.cleanup();
    assert!(h.reservations().is_empty());
}

#[test]
fn operator_commands_ls_gc_doctor_metrics() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let gq = |args: &[&str]| {
        let mut c = std::process::Command::new(bin("gpu-quota"));
        c.env("GPU_QUOTA_CONFIG", h.config()).args(args);
        capture(c)
    };
    let doctor = gq(&["doctor"]);
    assert_ok(&doctor, "doctor");
    let d = String::from_utf8_lossy(&doctor.stdout).to_string();
    assert!(
        d.contains("simulated") && d.contains("libcuda.so.580.1") && !d.contains("FAIL"),
        "{d}"
    );
    let b = h.bundle("ops");
    b.set(&[("vram", "5g")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "ops"]),
        "create",
    );
    let ls = String::from_utf8_lossy(&gq(&["ls"]).stdout).to_string();
    assert!(
        ls.contains("ops")
            && ls.contains("running")
            && ls.contains("5.00 GiB")
            && ls.contains("11.00 GiB")
            && ls.contains("(simulated)"),
        "{ls}"
    );
    let m = String::from_utf8_lossy(&gq(&["metrics"]).stdout).to_string();
    assert!(
        m.contains(&format!(
            "gpu_quota_container_slice_bytes{{container=\"ops\",namespace=\"\",pod=\"\",pod_uid=\"\",container_name=\"\",gpu=\"0\"}} {}",
            5 * GIB
        )),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "gpu_quota_gpu_reserved_bytes{{gpu=\"0\",uuid=\"{}\",simulated=\"true\"}} {}",
            uuid(0),
            5 * GIB
        )),
        "{m}"
    );
    // the container's process dies without `delete`: gc reclaims the slice
    assert_ok(&h.runc(&["kill", "ops", "KILL"]), "kill");
    for _ in 0..50 {
        if String::from_utf8_lossy(&h.runc(&["state", "ops"]).stdout).contains("stopped") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let dry = String::from_utf8_lossy(&gq(&["gc", "--dry-run"]).stdout).to_string();
    assert!(dry.contains("would reclaim ops"), "{dry}");
    assert_eq!(h.reservations().len(), 1, "dry run changes nothing");
    let gc = String::from_utf8_lossy(&gq(&["gc"]).stdout).to_string();
    assert!(gc.contains("reclaimed ops"), "{gc}");
    assert!(h.reservations().is_empty());
    assert!(String::from_utf8_lossy(&gq(&["gc"]).stdout).contains("nothing to reclaim"));
    assert_ok(&h.runtime(&["delete", "ops"]), "delete");
    // a corrupt ledger is reported, kept, and only reset on request
    std::fs::write(h.ledger_path(), b"{not json").unwrap();
    let o = gq(&["ls"]);
    assert!(
        !o.status.success() && stderr(&o).contains("corrupt"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(h.ledger_path()).unwrap(), b"{not json");
    assert!(String::from_utf8_lossy(&gq(&["gc", "--reset-corrupt"]).stdout).contains("moved to"));
    assert_ok(&gq(&["ls"]), "ls after reset");
}

/// `make install` layout: PREFIX/bin/{gpu-quota,gpu-quota-runtime,gpu-quota-hook}
/// and PREFIX/lib/gpu-quota/libgpuquota.so are found without any path in the config.
#[test]
fn install_layout_is_found_by_default() {
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path();
    std::fs::create_dir_all(p.join("bin")).unwrap();
    std::fs::create_dir_all(p.join("lib/gpu-quota")).unwrap();
    for b in ["gpu-quota", "gpu-quota-runtime", "gpu-quota-hook"] {
        std::fs::copy(bin(b), p.join("bin").join(b)).unwrap();
    }
    std::fs::write(p.join("lib/gpu-quota/libgpuquota.so"), b"so").unwrap();
    let cfg = p.join("config.toml");
    std::fs::write(&cfg, format!("ledger_dir = \"{}/ledger\"\n", p.display())).unwrap();
    let mut c = std::process::Command::new(p.join("bin/gpu-quota"));
    c.env("GPU_QUOTA_CONFIG", &cfg).arg("doctor");
    let out = String::from_utf8_lossy(&capture(c).stdout).to_string();
    let real = std::fs::canonicalize(p).unwrap();
    assert!(
        out.contains(&format!(
            "ok    gpu-quota-hook: {}/bin/gpu-quota-hook",
            p.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "ok    libgpuquota.so: {}/lib/gpu-quota/libgpuquota.so",
            real.display()
        )),
        "{out}"
    );
}
