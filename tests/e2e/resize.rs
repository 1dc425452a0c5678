//! `gpu-quota resize` on real runc containers: grow (admitted like a new
//! container, seen by a running process at its next call), refusals, shrink
//! while held and after the memory is freed, containers Kubernetes granted,
//! and kill -9 at every step of a resize (the ledger and the container's
//! live limit agree after the repair, on the old size or the new one).
use gpu_quota_e2e::cuda::*;
use gpu_quota_e2e::*;
use gpuquota_core::formats::grant;
use gpuquota_core::lifecycle::update::STEPS;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

fn gq(h: &Host, args: &[&str]) -> Output {
    let mut c = Command::new(bin("gpu-quota"));
    c.env("GPU_QUOTA_CONFIG", h.config()).args(args);
    capture(c)
}

/// The container's slice as the ledger holds it, and its marker.
fn ledger_bytes(h: &Host, id: &str) -> (u64, bool) {
    let r = h.reservations();
    let r = r
        .iter()
        .find(|r| r["container_id"] == id)
        .unwrap_or_else(|| panic!("{id} in {r:?}"));
    (
        r["slices"][0]["bytes"].as_u64().unwrap(),
        r.get("resizing").is_some(),
    )
}

/// The container's live limit: its grant file on the host.
fn grant_bytes(h: &Host) -> u64 {
    let dirs: Vec<_> = std::fs::read_dir(h.path().join("state/containers"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(dirs.len(), 1, "one container's state");
    let b = std::fs::read(dirs[0].path().join(grant::FILE_NAME)).unwrap();
    grant::decode(&b).unwrap().gpus()[0].vram_bytes
}

fn run_busybox(h: &Host, id: &str, ann: &[(&str, &str)]) {
    let b = h.bundle(id);
    b.set(ann, "touch /out/up; sleep 600", &[]);
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id]),
        "run",
    );
    b.wait_out("up", 10).expect("container up");
}

#[test]
fn grow_is_admitted_like_a_new_container_and_refused_when_it_does_not_fit() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: "log = \"file\"\n".into(),
        ..HostOpts::default()
    });
    run_busybox(&h, "a", &[("vram", "4g"), ("gpu", "0")]);
    run_busybox(&h, "b", &[("vram", "8g"), ("gpu", "0")]);
    // 16 GiB GPU, b holds 8: a cannot grow to 12
    let o = gq(&h, &["resize", "a", "12g"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("cannot resize container a") && e.contains("only 8.00 GiB"),
        "{e}"
    );
    assert_eq!(ledger_bytes(&h, "a"), (4 * GIB, false), "nothing changed");
    // to 8 it fits: the ledger, ls and the event log say so
    let o = gq(&h, &["resize", "a", "8g"]);
    assert_ok(&o, "resize");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("resized a on GPU 0: 4.00 GiB -> 8.00 GiB"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(ledger_bytes(&h, "a"), (8 * GIB, false));
    let ls = String::from_utf8_lossy(&gq(&h, &["ls"]).stdout).into_owned();
    assert!(
        ls.lines()
            .any(|l| l.starts_with("a ") && l.contains("8.00 GiB")),
        "{ls}"
    );
    let log = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains("\"event\":\"resized\"")
            && l.contains("4.00 GiB -> 8.00 GiB")
            && l.contains("by uid 0")),
        "{log}"
    );
    let m = String::from_utf8_lossy(&gq(&h, &["metrics"]).stdout).into_owned();
    assert!(m.lines().any(|l| l == "gpu_quota_resizes_total 1"), "{m}");
    // the snapshot `metrics` and `top` share shows the new size
    assert!(
        m.lines().any(
            |l| l.starts_with("gpu_quota_container_slice_bytes{container=\"a\"")
                && l.ends_with(&format!(" {}", 8 * GIB))
        ),
        "{m}"
    );
    // the GPU is now full: nothing else is admitted on it
    let c = h.bundle("c");
    c.set(&[("vram", "1g"), ("gpu", "0")], "true", &[]);
    assert!(!h
        .runtime(&["create", "--bundle", &c.bundle_arg(), "c"])
        .status
        .success());
    for id in ["a", "b"] {
        h.runtime(&["delete", "--force", id]);
    }
    assert!(h.reservations().is_empty());
}

#[test]
fn a_container_kubernetes_granted_is_not_resized_here() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    run_busybox(
        &h,
        "k",
        &[
            ("vram", "4g"),
            ("io.kubernetes.cri.sandbox-namespace", "team"),
            ("io.kubernetes.cri.sandbox-name", "nb-0"),
        ],
    );
    let o = gq(&h, &["resize", "k", "8g"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("granted by Kubernetes (pod team/nb-0)") && e.contains("pod's request"),
        "{e}"
    );
    assert_eq!(ledger_bytes(&h, "k"), (4 * GIB, false));
    // and a name nobody holds: the standalone preload has nothing to resize
    let e = stderr(&gq(&h, &["resize", "nope", "8g"]));
    assert!(
        e.contains("GPU_QUOTA_VRAM") && e.contains("nothing to resize"),
        "{e}"
    );
    h.runtime(&["delete", "--force", "k"]);
}

/// Run the stepper until it reports its step, then kill -9 it.
fn kill_at(h: &Host, id: &str, size: &str, step: usize) {
    // a step a grow does not take (Checked): the resize runs to its end
    kill_at_point(h, id, size, &step.to_string());
}

/// Run the stepper to `point` (a step's index, or `wN`: the Nth step of
/// its ledger writes), then kill -9 it. false: it ran to its end instead.
fn kill_at_point(h: &Host, id: &str, size: &str, point: &str) -> bool {
    let mut child = Command::new(bin("resize-stepper"))
        .args([h.config().to_str().unwrap(), id, size, point])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert!(
        line.starts_with("at-step") || line.starts_with("done"),
        "{line}"
    );
    line.starts_with("at-step")
}

/// How many ledger records hold container `id`.
fn records_of(h: &Host, id: &str) -> usize {
    h.ledger_records()
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter(|b| serde_json::from_slice::<serde_json::Value>(b).unwrap()["container_id"] == id)
        .count()
}

/// A host whose NVML is the fake one (its two GPUs are the host's): a shrink
/// needs the driver's per-process account (lifecycle::held), and the fake
/// NVML sees no process of these containers hold memory.
fn host_with_fake_nvml() -> Host {
    let h = Host::new(HostOpts::default());
    let nvml = h.path().join("lib/libnvidia-ml.so.580.1");
    std::fs::remove_file(&nvml).unwrap();
    std::fs::copy(repo().join("tests/fake/build/libnvidia-ml.so.1"), &nvml).unwrap();
    std::fs::write(h.path().join("lib/fake-nvml-devices"), "2").unwrap();
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    std::fs::write(
        h.config(),
        cfg.replace(&uuid(0), &fake_uuid(0))
            .replace(&uuid(1), &fake_uuid(1)),
    )
    .unwrap();
    h
}

/// kill -9 at every step of a resize's ledger writes (a record's name
/// carries its bytes: a resized record is written under its new name and
/// the old one removed after): the next `gc` leaves exactly one record of
/// the container, and it agrees with the live limit.
#[test]
fn kill_at_every_write_of_a_resize_leaves_one_record_after_gc() {
    require_e2e!();
    let h = host_with_fake_nvml();
    run_busybox(&h, "kw", &[("vram", "4g")]);
    let mut twice = 0;
    for (to, size) in [(6 * GIB, "6g"), (2 * GIB, "2g")] {
        for n in 0.. {
            assert_eq!(ledger_bytes(&h, "kw"), (4 * GIB, false));
            assert_eq!(grant_bytes(&h), 4 * GIB);
            let killed = kill_at_point(&h, "kw", size, &format!("w{n}"));
            if killed && records_of(&h, "kw") > 1 {
                twice += 1;
            }
            assert_ok(&gq(&h, &["gc"]), "gc");
            let at = format!("kill -9 at write {n} of the resize to {size}");
            assert_eq!(records_of(&h, "kw"), 1, "one record after gc ({at})");
            let (l, marked) = ledger_bytes(&h, "kw");
            assert!(!marked, "repaired ({at})");
            assert_eq!(l, grant_bytes(&h), "the ledger and the limit agree ({at})");
            assert!(l == 4 * GIB || l == to, "old or new: {l} ({at})");
            if l != 4 * GIB {
                assert_ok(&gq(&h, &["resize", "kw", "4g"]), "resize back");
            }
            if !killed {
                break;
            }
        }
    }
    // the test can fail: a kill between the two names is seen
    assert!(twice > 0, "no kill left the container held twice before gc");
    h.runtime(&["delete", "--force", "kw"]);
}

#[test]
fn kill_at_every_step_of_a_resize_leaves_the_ledger_and_the_limit_agreeing() {
    require_e2e!();
    let h = host_with_fake_nvml();
    run_busybox(&h, "k9", &[("vram", "4g")]);
    let mut disagreed = 0;
    for (from, to, size) in [(4 * GIB, 6 * GIB, "6g"), (4 * GIB, 2 * GIB, "2g")] {
        for (i, step) in STEPS.iter().enumerate() {
            assert_eq!(ledger_bytes(&h, "k9"), (from, false));
            assert_eq!(grant_bytes(&h), from);
            kill_at(&h, "k9", size, i);
            // before the repair the two may disagree (what the marker is for)
            let (l, marked) = ledger_bytes(&h, "k9");
            if l != grant_bytes(&h) {
                disagreed += 1;
                assert!(marked, "a disagreement is always marked ({step:?})");
            }
            assert_ok(&gq(&h, &["gc"]), "gc");
            let (l, marked) = ledger_bytes(&h, "k9");
            let g = grant_bytes(&h);
            assert!(!marked, "repaired ({step:?})");
            assert_eq!(l, g, "the ledger and the limit agree after {step:?}");
            assert!(l == from || l == to, "old or new, never a mixture: {l}");
            // back to the start for the next step
            if l != from {
                assert_ok(&gq(&h, &["resize", "k9", "4g"]), "resize back");
            }
        }
    }
    // the test can fail: a kill between the ledger and the limit is seen
    assert!(disagreed > 0, "no step left them apart before the repair");
    h.runtime(&["delete", "--force", "k9"]);
}

#[test]
fn a_running_process_sees_a_grow_and_a_shrink_waits_until_it_fits() {
    require_e2e!();
    let (h, b, _) = cuda_host("rz", "context_overhead = \"0\"");
    // one process holds 3 GiB, is refused 2 more, waits for /out/go, then
    // asks again in the same process; it frees everything at /out/end
    b.set(
        &[("vram", "4g")],
        "cuda_probe wait 3 2 /out > /out/log 2>&1; touch /out/exited; sleep 600",
        &["FAKE_CUDA_MEM_BYTES=17179869184"],
    );
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "rz"]),
        "run",
    );
    b.wait_out("ready", 20).expect("probe holds 3 GiB");
    // a shrink below what it holds is refused, naming the process
    let o = gq(&h, &["resize", "rz", "2g"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("cannot shrink container rz to 2.00 GiB")
            && e.contains("holds 3.00 GiB")
            && e.contains("pid "),
        "{e}"
    );
    assert_eq!(ledger_bytes(&h, "rz"), (4 * GIB, false));
    assert_eq!(grant_bytes(&h), 4 * GIB, "the limit is back");
    // grow: the same process allocates the 2 GiB it was refused
    assert_ok(&gq(&h, &["resize", "rz", "8g"]), "grow");
    std::fs::write(b.out.join("go"), b"").unwrap();
    b.wait_out("again", 20).expect("probe asked again");
    let log = std::fs::read_to_string(b.out.join("log")).unwrap();
    assert!(
        log.contains("alloc 3 GiB rc=0\nalloc 2 GiB rc=2\n")
            && log.contains(&format!("total={}", 8 * GIB))
            && log.contains("again 2 GiB rc=0"),
        "{log}"
    );
    // it holds 5 GiB: a shrink to 4 waits until it has freed them
    let e = stderr(&gq(&h, &["resize", "rz", "4g"]));
    assert!(e.contains("holds 5.00 GiB"), "{e}");
    std::fs::write(b.out.join("end"), b"").unwrap();
    b.wait_out("exited", 20).expect("probe exited");
    assert_ok(&gq(&h, &["resize", "rz", "4g"]), "shrink once it fits");
    assert_eq!(
        (ledger_bytes(&h, "rz"), grant_bytes(&h)),
        ((4 * GIB, false), 4 * GIB)
    );
    h.runtime(&["delete", "--force", "rz"]);
}

/// A host on the fake driver whose NVML sees every process that holds fake
/// device memory, with its bytes, by the pid the host gives it, as the real
/// driver does: the host gets its own copy of the fake libraries with the
/// fake GPU's registry beside them (fake-gpu-registry, tests/fake/fake_cuda.h),
/// and the container's fake libcuda writes the same registry, through /out.
/// `processes`: the fake NVML's fake-nvml-processes knob ("not-supported",
/// "unattributed"), or none. The bundle's processes see a 16 GiB GPU 0.
fn driver_host(name: &str, processes: Option<&str>) -> (Host, Bundle) {
    let (h, b, _) = cuda_host(name, "context_overhead = \"0\"");
    let lib = private_fake_driver(&h, &b.out.join("fake-gpu"));
    if let Some(p) = processes {
        std::fs::write(lib.join("fake-nvml-processes"), p).unwrap();
    }
    (h, b)
}

/// The container script: one process holds `gib` GiB (cuda_probe keep; it
/// frees them at /out/free); then, where `zero`, root in the container
/// zeroes its usage file (the interceptor's account of what it holds).
fn holder(b: &Bundle, slice: &str, gib: &str, zero: bool) {
    let zero = if zero {
        "busybox dd if=/dev/zero of=/run/gpu-quota/usage bs=4096 count=65 conv=notrunc 2>/out/dd; "
    } else {
        ""
    };
    b.set(
        &[("vram", slice), ("gpu", "0")],
        &format!(
            "cuda_probe keep {gib} /out > /out/log 2>&1 & \
             while [ ! -e /out/held ]; do sleep 0.1; done; {zero}touch /out/up; sleep 600"
        ),
        &[
            "FAKE_CUDA_MEM_BYTES=17179869184",
            "FAKE_CUDA_PEAK_FILE=/out/fake-gpu",
        ],
    );
}

fn start(h: &Host, b: &Bundle, id: &str) {
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id]),
        "run",
    );
    b.wait_out("up", 20).expect("the holder is up");
    let log = std::fs::read_to_string(b.out.join("log")).unwrap();
    assert!(log.contains("rc=0"), "{log}");
}

/// What the container's usage file says it holds (`gpu-quota ls`'s USED).
fn usage_says(h: &Host, id: &str) -> String {
    let ls = String::from_utf8_lossy(&gq(h, &["ls"]).stdout).into_owned();
    ls.lines()
        .find(|l| l.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("{id} in {ls}"))
        .to_string()
}

#[test]
fn a_shrink_is_refused_by_what_the_driver_sees_when_the_usage_file_is_zeroed() {
    require_e2e!();
    let (h, b) = driver_host("zv", None);
    holder(&b, "8g", "7", true);
    start(&h, &b, "zv");
    // the container's own word: nothing held (the negative control of the
    // lie: the old code believed it)
    let ls = usage_says(&h, "zv");
    assert!(!ls.contains("7.00 GiB"), "the usage file was zeroed: {ls}");
    // the driver sees the host pid of the process holding 7 GiB
    let o = gq(&h, &["resize", "zv", "2g"]);
    let e = stderr(&o);
    assert!(!o.status.success(), "a shrink below what it holds: {e}");
    assert!(
        e.contains("cannot shrink container zv to 2.00 GiB on GPU 0")
            && e.contains("holds 7.29 GiB")
            && e.contains("host pid ")
            && e.contains("by the driver"),
        "{e}"
    );
    assert_eq!(ledger_bytes(&h, "zv"), (8 * GIB, false), "nothing freed");
    assert_eq!(grant_bytes(&h), 8 * GIB, "the limit is back");
    // the room is not handed to another tenant
    let w = h.bundle("zw");
    w.set(&[("vram", "14g"), ("gpu", "0")], "true", &[]);
    assert!(!h
        .runtime(&["create", "--bundle", &w.bundle_arg(), "zw"])
        .status
        .success());
    h.runtime(&["delete", "--force", "zv"]);
}

#[test]
fn a_live_process_that_freed_its_memory_does_not_block_a_shrink() {
    require_e2e!();
    let (h, b) = driver_host("fv", None);
    holder(&b, "8g", "7", false);
    start(&h, &b, "fv");
    let e = stderr(&gq(&h, &["resize", "fv", "2g"]));
    assert!(e.contains("holds 7.29 GiB"), "held, then: {e}");
    std::fs::write(b.out.join("free"), b"").unwrap();
    b.wait_out("freed", 20)
        .expect("the process freed its memory");
    // alive, holding nothing: the driver and the usage file agree
    assert_ok(&gq(&h, &["resize", "fv", "2g"]), "shrink once freed");
    assert_eq!(
        (ledger_bytes(&h, "fv"), grant_bytes(&h)),
        ((2 * GIB, false), 2 * GIB)
    );
    h.runtime(&["delete", "--force", "fv"]);
}

#[test]
fn where_the_driver_cannot_tell_a_shrink_is_refused_and_a_grow_is_not() {
    require_e2e!();
    for (mode, id) in [("not-supported", "nv"), ("unattributed", "uv")] {
        let (h, b) = driver_host(id, Some(mode));
        holder(&b, "8g", "1", false);
        start(&h, &b, id);
        // the usage file says 1 GiB, well below 4: still refused, and why
        let o = gq(&h, &["resize", id, "4g"]);
        let e = stderr(&o);
        assert!(!o.status.success(), "{mode}: {e}");
        assert!(
            e.contains(&format!("cannot shrink container {id} to 4.00 GiB"))
                && e.contains("the host cannot see what")
                && e.contains("recreate the container"),
            "{mode}: {e}"
        );
        assert_eq!(ledger_bytes(&h, id), (8 * GIB, false), "{mode}");
        assert_eq!(grant_bytes(&h), 8 * GIB, "{mode}");
        // a grow needs nothing of the driver's accounting
        assert_ok(&gq(&h, &["resize", id, "10g"]), "grow");
        assert_eq!(ledger_bytes(&h, id), (10 * GIB, false), "{mode}");
        h.runtime(&["delete", "--force", id]);
    }
}
