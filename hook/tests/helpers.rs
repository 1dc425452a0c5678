//! The driver's helper children (gpu-quota-driver) against the fake driver (tests/fake, built by
//! `make -C tests/fake`): the measured context cost, and the r615 driver
//! limit set/clear with the fake NVML recording its calls.
use gpuquota_core::ctxcost::{self, Cache, ChildMeasurer, Measurer, Setting, Source, Target};
use gpuquota_core::drvlimit::{self, Cleared, GpuLimit};
use gpuquota_core::helper::HelperError;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// The fake's GPU 0 (tests/fake/fake_cuda.c uuid_of, fake_nvml.c).
const FAKE_UUID: &str = "GPU-face3344-5566-7788-99aa-bbccddeeff00";
/// fake_nvml.c: a process's context, seen only through NVML's per-process query.
const FAKE_CTX: u64 = 300 * MIB;

/// gpu-quota-driver, the binary the hook runs its driver children as.
fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-quota-driver"))
}

fn fake(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake/build")
        .join(name);
    assert!(p.is_file(), "{} missing: make -C tests/fake", p.display());
    std::fs::canonicalize(p).unwrap()
}

fn measurer() -> ChildMeasurer {
    ChildMeasurer {
        helper: helper(),
        libcuda: fake("libcuda.so.1"),
        libnvml: fake("libnvidia-ml.so.1"),
        timeout: Duration::from_secs(20),
    }
}

#[test]
fn the_child_measures_the_fake_context_through_nvml() {
    // the parent's environment must not reach the child (cleared env)
    std::env::set_var("FAKE_NVML_CTX_BYTES", "12345");
    let m = measurer().measure(FAKE_UUID).unwrap();
    assert_eq!(m.context_bytes, FAKE_CTX, "{m:?}");
    assert_eq!(m.alloc_bytes, 2 * MIB);
    assert_eq!(m.gpu_name, "Fake GPU");
    assert_eq!(m.driver_version, "580.1.fake");
    let e = measurer().measure("GPU-00000000-0000-0000-0000-000000000000");
    assert!(
        format!("{e:?}").contains("no CUDA device has uuid"),
        "{e:?}"
    );
}

#[test]
fn auto_measures_once_and_charges_context_plus_margin() {
    let d = tempfile::tempdir().unwrap();
    let cache = Cache::new(d.path());
    let m = measurer();
    let t = [Target {
        uuid: FAKE_UUID,
        gpu_name: "Fake GPU",
    }];
    let r = ctxcost::resolve(Setting::Auto, &cache, Some("580.1"), &t, Some(&m));
    assert_eq!(r.source, Source::Measured);
    assert_eq!(r.bytes, FAKE_CTX + ctxcost::MARGIN_BYTES);
    // cached: a broken measurer is not even asked
    let broken = ChildMeasurer {
        helper: "/nonexistent".into(),
        ..measurer()
    };
    let r2 = ctxcost::resolve(Setting::Auto, &cache, Some("580.1"), &t, Some(&broken));
    assert_eq!((r2.source, r2.bytes), (Source::Cache, r.bytes));
    let text = std::fs::read_to_string(cache.path()).unwrap();
    assert!(text.contains("\"context_bytes\": 314572800"), "{text}");
}

/// A copy of the fake NVML in its own directory, with the call log beside it.
fn nvml_with_log(variant: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake(variant), &lib).unwrap();
    let log = d.path().join("fake-nvml-limits.log");
    std::fs::write(&log, "").unwrap();
    (d, lib, log)
}

#[test]
fn driver_limit_is_set_then_cleared_while_the_cgroup_exists() {
    let (d, lib, log) = nvml_with_log("libnvidia-ml.so.1");
    let cg = d.path().join("cgroup/ctr.scope");
    std::fs::create_dir_all(&cg).unwrap();
    let gpus = [GpuLimit {
        uuid: FAKE_UUID.into(),
        hard_bytes: 4 << 30,
    }];
    assert!(drvlimit::maybe_supported(&lib));
    let rec = drvlimit::apply_via_helper(&helper(), &lib, &cg, &gpus)
        .unwrap()
        .expect("r615 fake: set");
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        lines.lines().next().unwrap().split(" pid=").next().unwrap(),
        format!(
            "set uuid={FAKE_UUID} ns={} soft=0 hard={}",
            cg.display(),
            4u64 << 30
        )
    );
    // the runtime's delete: clear from the record in the state dir
    let state = d.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(
        state.join(drvlimit::RECORD_FILE),
        serde_json::to_vec(&rec).unwrap(),
    )
    .unwrap();
    assert_eq!(
        drvlimit::clear_recorded(&helper(), &lib, &state).unwrap(),
        Some(Cleared::Cleared)
    );
    let lines = std::fs::read_to_string(&log).unwrap();
    let last = lines.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "set uuid={FAKE_UUID} ns={} soft=0 hard={}",
            cg.display(),
            u64::MAX
        )),
        "{lines}"
    );
    assert!(
        !state.join(drvlimit::RECORD_FILE).exists(),
        "record removed"
    );
    // nothing recorded: nothing to do
    assert_eq!(
        drvlimit::clear_recorded(&helper(), &lib, &state).unwrap(),
        None
    );
    // once the cgroup is gone there is nothing to clear (and no call)
    std::fs::write(
        state.join(drvlimit::RECORD_FILE),
        serde_json::to_vec(&rec).unwrap(),
    )
    .unwrap();
    std::fs::remove_dir(&cg).unwrap();
    assert_eq!(
        drvlimit::clear_recorded(&helper(), &lib, &state).unwrap(),
        Some(Cleared::Gone)
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
}

#[test]
fn drivers_before_r615_are_detected_and_left_alone() {
    let (d, lib, log) = nvml_with_log("r580/libnvidia-ml.so.1");
    let cg = d.path().join("cg");
    std::fs::create_dir(&cg).unwrap();
    assert!(
        !drvlimit::maybe_supported(&lib),
        "no symbol name in the file"
    );
    let gpus = [GpuLimit {
        uuid: FAKE_UUID.into(),
        hard_bytes: 1 << 30,
    }];
    assert_eq!(
        drvlimit::apply_via_helper(&helper(), &lib, &cg, &gpus).unwrap(),
        None
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "");
    let det = drvlimit::detect_at(Some(&lib), Path::new("/nonexistent"));
    assert!(!det.symbol && !det.usable(), "{det:?}");
    let det = drvlimit::detect_at(Some(&fake("libnvidia-ml.so.1")), Path::new("/nonexistent"));
    assert!(det.symbol && !det.cgroup_v2 && !det.usable(), "{det:?}");
}

/// A driver whose cuInit never returns: the child is killed at the timeout
/// (with its process group) and the parent gets an error, not a hang.
#[test]
fn a_hanging_driver_is_killed_at_the_timeout() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("hang.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\nint cuInit(unsigned f) { (void)f; for (;;) pause(); return 0; }\n",
    )
    .unwrap();
    let lib = d.path().join("libcuda.so.1");
    let o = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = ChildMeasurer {
        libcuda: lib,
        timeout: Duration::from_millis(800),
        ..measurer()
    };
    let t = std::time::Instant::now();
    let e = m.measure(FAKE_UUID).unwrap_err();
    assert!(
        matches!(
            e,
            ctxcost::CtxCostError::Helper(HelperError::Timeout { .. })
        ),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    // no measure-context child of ours is left
    std::thread::sleep(Duration::from_millis(200));
    let me = std::process::id().to_string();
    let left: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|st| {
            let f: Vec<&str> = st.rsplit(") ").next().unwrap_or("").split(' ').collect();
            f.get(1) == Some(&me.as_str()) && st.contains("(gpu-quota-drive") && f[0] != "Z"
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The fake GPU's registry (tests/fake/fake_cuda.h `struct fake_shared`):
/// where slot i's pid, pid namespace and bytes on device 0 lie.
const REG_PROCS: usize = 8 + 3 * 8 * 8 + 4 * 8;
const REG_SLOT: usize = 4 + 4 + 8 * 8;
const REG_SIZE: usize = REG_PROCS + 256 * REG_SLOT;

fn reg_slot(reg: &mut [u8], i: usize, pid: i32, pidns: u32, dev0: u64) {
    let o = REG_PROCS + i * REG_SLOT;
    reg[o..o + 4].copy_from_slice(&pid.to_ne_bytes());
    reg[o + 4..o + 8].copy_from_slice(&pidns.to_ne_bytes());
    reg[o + 8..o + 16].copy_from_slice(&dev0.to_ne_bytes());
}

#[test]
fn the_child_lists_the_processes_the_fake_gpu_knows_with_their_memory() {
    use gpuquota_core::procmem::{read_via_helper, GpuProcess, ProcessesReply};
    const GIB: u64 = 1 << 30;
    let d = tempfile::tempdir().unwrap();
    let lib = d.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake("libnvidia-ml.so.1"), &lib).unwrap();
    // the registry beside the library, as a process with an empty
    // environment (this child) finds it
    let mut reg = vec![0u8; REG_SIZE];
    let me = std::process::id() as i32;
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id() as i32;
    gone.wait().unwrap();
    reg_slot(&mut reg, 0, me, 0, 5 * GIB);
    reg_slot(&mut reg, 1, gone_pid, 0, GIB); // exited: holds nothing
    reg_slot(&mut reg, 2, 1, 1, GIB); // a pid namespace no process has
    reg_slot(&mut reg, 3, me, 0, 0); // nothing on this GPU
    std::fs::write(d.path().join("fake-gpu-registry"), &reg).unwrap();
    let list = || read_via_helper(&helper(), &lib, FAKE_UUID).unwrap();
    assert_eq!(
        list(),
        ProcessesReply::Listed(vec![GpuProcess {
            pid: me as u32,
            used_bytes: Some(5 * GIB + FAKE_CTX),
        }])
    );
    // a driver that does not attribute memory, or cannot list processes
    let knob = d.path().join("fake-nvml-processes");
    std::fs::write(&knob, "unattributed").unwrap();
    assert_eq!(
        list(),
        ProcessesReply::Listed(vec![GpuProcess {
            pid: me as u32,
            used_bytes: None,
        }])
    );
    std::fs::write(&knob, "not-supported").unwrap();
    let ProcessesReply::Unsupported(why) = list() else {
        panic!("{:?}", list());
    };
    assert!(why.contains("not supported"), "{why}");
    // an NVML that cannot find the GPU is an error, not an empty list
    let e = read_via_helper(&helper(), &lib, "GPU-00000000-0000-0000-0000-000000000000")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nvmlDeviceGetHandleByUUID"), "{e}");
}
