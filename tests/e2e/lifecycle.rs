//! One lifecycle. Every path that ends a container clears the
//! r615 driver limit the hook recorded (`gc`, `gpu-quota release`, the
//! hook's poststop, as the runtime's `delete` already did), and the hook
//! acts on the reservation made at `create`, not on a second reading of the
//! request under the host policy of its own moment.
//!
//! The driver limit: this host's cgroups are v1 and its GPUs simulated, so
//! the hook sets none itself; the tests put the fake r615 NVML
//! (tests/fake/fake_nvml.c, which logs every nvmlDeviceSetMemoryLimits_v1
//! call) among the host's driver files and write the record the hook writes
//! after a successful set (`driver-limits.json` in the state directory, on
//! a stand-in cgroup directory). A clear is the logged call `soft=0
//! hard=u64::MAX` on that cgroup.
use gpu_quota_e2e::*;
use gpuquota_core::drvlimit::{GpuLimit, Record, RECORD_FILE};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A UUID the fake NVML knows (tests/fake/fake_nvml.c).
const FAKE_UUID: &str = "GPU-face3344-5566-7788-99aa-bbccddeeff00";

/// A host whose libnvidia-ml is the fake r615 NVML, with its call log.
fn limit_host() -> (Host, PathBuf) {
    let h = Host::new(HostOpts::default());
    let fake = repo_dir().join("tests/fake/build/libnvidia-ml.so.1");
    assert!(
        fake.is_file(),
        "{} not built: make -C tests/fake",
        fake.display()
    );
    let lib = h.path().join("lib/libnvidia-ml.so.580.1");
    std::fs::remove_file(&lib).unwrap();
    std::fs::copy(&fake, &lib).unwrap();
    let log = h.path().join("lib/fake-nvml-limits.log");
    std::fs::write(&log, "").unwrap();
    (h, log)
}

fn gq(h: &Host, args: &[&str]) -> Output {
    let mut c = Command::new(bin("gpu-quota"));
    c.env("GPU_QUOTA_CONFIG", h.config())
        .args(args)
        .stdin(Stdio::null());
    capture(c)
}

fn reservation(h: &Host, id: &str) -> Option<Value> {
    h.reservations()
        .into_iter()
        .find(|r| r["container_id"] == id)
}

/// Create and start `id` through the runtime (a `vram=4g` slice), then
/// record a driver limit for it as the hook does on an r615 host; returns
/// the stand-in cgroup and the state directory.
fn started_with_limit(h: &Host, id: &str) -> (PathBuf, PathBuf) {
    let b = h.bundle(id);
    b.set(&[("vram", "4g")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), id]),
        "create",
    );
    assert_ok(&h.runtime(&["start", id]), "start");
    let r = reservation(h, id).expect("admitted");
    let dir = h
        .path()
        .join("state/containers")
        .join(gpuquota_core::state::dir_name(
            id,
            r["runtime_root"].as_str(),
            r["bundle"].as_str().unwrap(),
        ));
    assert!(dir.is_dir(), "{}", dir.display());
    let cg = h.path().join("cgroup").join(id);
    std::fs::create_dir_all(&cg).unwrap();
    let m = std::fs::metadata(&cg).unwrap();
    let rec = Record {
        cgroup: cg.clone(),
        dev: m.dev(),
        ino: m.ino(),
        gpus: vec![GpuLimit {
            uuid: FAKE_UUID.into(),
            hard_bytes: 4 << 30,
        }],
    };
    std::fs::write(dir.join(RECORD_FILE), serde_json::to_vec(&rec).unwrap()).unwrap();
    (cg, dir)
}

/// Whether the fake NVML logged the clear of `cg` (soft 0, hard max).
fn cleared(log: &Path, cg: &Path) -> bool {
    let want = format!(
        "set uuid={FAKE_UUID} ns={} soft=0 hard={}",
        cg.display(),
        u64::MAX
    );
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .any(|l| l.starts_with(&want))
}

fn kill_init(h: &Host, id: &str) {
    let pid = reservation(h, id).unwrap()["pid"].as_u64().unwrap() as i32;
    // SAFETY: plain kill(2) of the container's init, which we started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    for _ in 0..100 {
        if String::from_utf8_lossy(&h.runc(&["state", id]).stdout).contains("stopped") {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{id} did not stop");
}

/// Control for the three tests below: the runtime's `delete` clears the
/// recorded limit (the fake NVML, the record and the log work together).
#[test]
fn runtime_delete_clears_the_driver_limit() {
    require_e2e!();
    let (h, log) = limit_host();
    let (cg, _) = started_with_limit(&h, "del1");
    assert!(!cleared(&log, &cg));
    assert_ok(&h.runtime(&["delete", "--force", "del1"]), "delete");
    assert!(reservation(&h, "del1").is_none());
    assert!(
        cleared(&log, &cg),
        "log: {:?}",
        std::fs::read_to_string(&log)
    );
}

#[test]
fn gc_clears_the_driver_limit_of_a_reclaimed_container() {
    require_e2e!();
    let (h, log) = limit_host();
    let (cg, dir) = started_with_limit(&h, "gc1");
    kill_init(&h, "gc1");
    assert!(!cleared(&log, &cg), "nothing cleared before gc");
    let o = gq(&h, &["gc"]);
    assert_ok(&o, "gc");
    assert!(reservation(&h, "gc1").is_none(), "reclaimed");
    assert!(
        cleared(&log, &cg),
        "gc cleared the limit; log: {:?}",
        std::fs::read_to_string(&log)
    );
    assert!(!dir.exists(), "state removed");
}

#[test]
fn release_clears_the_driver_limit() {
    require_e2e!();
    let (h, log) = limit_host();
    let (cg, dir) = started_with_limit(&h, "rel1");
    kill_init(&h, "rel1");
    assert!(!cleared(&log, &cg));
    let o = gq(&h, &["release", "rel1", "--yes"]);
    assert_ok(&o, "release");
    assert!(reservation(&h, "rel1").is_none(), "released");
    assert!(
        cleared(&log, &cg),
        "release cleared the limit; log: {:?}",
        std::fs::read_to_string(&log)
    );
    assert!(!dir.exists(), "state removed");
}

#[test]
fn hook_poststop_clears_the_driver_limit() {
    require_e2e!();
    let (h, log) = limit_host();
    let (cg, dir) = started_with_limit(&h, "ps1");
    kill_init(&h, "ps1");
    assert!(!cleared(&log, &cg));
    // plain runc: only the hook's poststop ends this container
    assert_ok(&h.runc(&["delete", "ps1"]), "runc delete");
    assert!(reservation(&h, "ps1").is_none(), "released by poststop");
    assert!(
        cleared(&log, &cg),
        "poststop cleared the limit; log: {:?}",
        std::fs::read_to_string(&log)
    );
    assert!(!dir.exists(), "state removed");
}

/// The host turns `env_requests` off between the runtime's admission and
/// the hook (a createRuntime hook placed before ours rewrites the config):
/// the container was admitted and given its devices, so the hook sets up
/// the reservation it finds, interceptor included.
#[test]
fn hook_acts_on_the_reservation_when_env_policy_flips() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: "env_requests = true\n".into(),
        ..Default::default()
    });
    let cfg = h.config().to_string_lossy().into_owned();
    let b = h.bundle("flip");
    b.set(
        &[],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits; touch /out/done",
        &["GPU_QUOTA_VRAM=4g"],
    );
    let mut v = b.config();
    v["hooks"] = json!({"createRuntime": [{
        "path": "/bin/sed",
        "args": ["sed", "-i", "s/^env_requests = true$/env_requests = false/", cfg]
    }]});
    b.write_config(&v);
    let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "flip1"]);
    assert_ok(&o, "run");
    // the flip happened before our hook ran
    let text = std::fs::read_to_string(h.config()).unwrap();
    assert!(text.contains("\nenv_requests = false\n"), "{text}");
    b.wait_out("done", 10).expect("ran");
    let limits = std::fs::read_to_string(b.out.join("limits")).unwrap_or_default();
    assert!(
        limits.contains("container_id=flip1\n") && out_grant(&b.out) == [4 * GIB],
        "the hook set up the admitted slice: limits {limits:?}; runtime: {}",
        stderr(&o)
    );
    assert!(h.reservations().is_empty(), "released after run");
    // control: the flipped policy is in force for the next create
    let b2 = h.bundle("after");
    b2.set(&[], "true", &["GPU_QUOTA_VRAM=4g"]);
    let o = h.runtime(&["create", "--bundle", &b2.bundle_arg(), "after1"]);
    assert_ok(&o, "create after the flip");
    assert!(
        reservation(&h, "after1").is_none(),
        "env request ignored now"
    );
    assert!(
        stderr(&o).contains("ignoring GPU_QUOTA_VRAM"),
        "{}",
        stderr(&o)
    );
}
