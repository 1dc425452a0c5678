//! Burstable slices on real runc containers over the fake driver, whose
//! device memory is shared by every container (one registry) and whose
//! managed memory the driver evicts to host memory under pressure, as the
//! H200's does (tests/fake): admission sums guarantees only; a burst is
//! lent past the guarantee up to the limit while the GPU has it free; a
//! guaranteed allocation gets its memory back from bursters; and where the
//! driver cannot move it, `gpu-quota burst-supervise` ends bursters in
//! order (lowest priority, then newest), never a guaranteed container.
use gpu_quota_e2e::cuda::*;
use gpu_quota_e2e::*;
use gpuquota_core::formats::grant;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GPU_BYTES: &str = "FAKE_CUDA_MEM_BYTES=17179869184";

/// A host on the fake driver, a 16 GiB GPU 0 whose registry every
/// container shares (mounted at /gpu), and a function making bundles with
/// the CUDA probe in them.
struct Gpu {
    h: Host,
    template: Bundle,
    shared: PathBuf,
}

impl Gpu {
    fn new(name: &str, extra: &str) -> Gpu {
        let (h, template, _) = cuda_host(
            name,
            &format!("context_overhead = \"0\"\nlog = \"file\"\n{extra}"),
        );
        let shared = h.path().join("gpu");
        std::fs::create_dir_all(&shared).unwrap();
        // the host's fake NVML sees the containers' registry
        private_fake_driver(&h, &shared.join("registry"));
        Gpu {
            h,
            template,
            shared,
        }
    }

    /// A bundle `id` with the probe, `ann`, running `script`, its fake
    /// driver on the shared registry (`env`: more of the fake's knobs).
    fn bundle(&self, id: &str, ann: &[(&str, &str)], script: &str, env: &[&str]) -> Bundle {
        let b = self.h.bundle(id);
        let st = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", self.template.rootfs().display()))
            .arg(b.rootfs())
            .status()
            .unwrap();
        assert!(st.success());
        let mut all = vec![GPU_BYTES, "FAKE_CUDA_PEAK_FILE=/gpu/registry"];
        all.extend_from_slice(env);
        b.set(ann, script, &all);
        let mut c = b.config();
        c["mounts"].as_array_mut().unwrap().push(serde_json::json!({
            "destination": "/gpu", "type": "bind",
            "source": self.shared.to_str().unwrap(), "options": ["rbind", "rw"]}));
        b.write_config(&c);
        b
    }

    fn registry(&self) -> PathBuf {
        self.shared.join("registry")
    }

    /// `gpu-quota` on this host.
    fn gq(&self, args: &[&str]) -> std::process::Output {
        let mut c = Command::new(bin("gpu-quota"));
        c.env("GPU_QUOTA_CONFIG", self.h.config()).args(args);
        capture(c)
    }

    /// Run a container in the foreground (its stdio the child's pipes: the
    /// container's stderr is a pipe, as under an engine).
    fn run(&self, b: &Bundle, id: &str) -> Child {
        self.h
            .runtime_cmd(&["run", "--bundle", &b.bundle_arg(), id])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// The reclaim word of the grant of the one container whose state
/// directory name starts with `id`.
fn word(h: &Host, id: &str) -> Option<u64> {
    let dir = std::fs::read_dir(h.path().join("state/containers"))
        .ok()?
        .flatten()
        .find(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with(&format!("{id}-"))
        })?;
    let b = std::fs::read(dir.path().join(grant::FILE_NAME)).ok()?;
    let o = grant::reclaim_offset(0);
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// The driver frees a dead process's memory within about a second; the
/// fake frees it at the next charge by a process of the dead one's pid
/// namespace, which a killed container no longer has. So, as the driver,
/// the host reaps: `fake-registry-dump --reap` every 200 ms, where every
/// container's pid namespace is visible.
struct Reaper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    t: Option<std::thread::JoinHandle<()>>,
}

impl Reaper {
    fn start(reg: PathBuf) -> Reaper {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Command::new(repo().join("tests/fake/build/fake-registry-dump"))
                    .arg("--reap")
                    .arg(&reg)
                    .stdout(Stdio::null())
                    .status();
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Reaper { stop, t: Some(t) }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.t.take() {
            let _ = t.join();
        }
    }
}

/// `gpu-quota burst-supervise`, stopped however the test ends (a failed
/// assertion must not leave it running on the host).
struct Supervisor(Child);

impl Supervisor {
    /// Stop it; what it said.
    fn stop(&mut self) -> String {
        use std::io::Read;
        let _ = self.0.kill();
        let _ = self.0.wait();
        let mut s = String::new();
        if let Some(e) = self.0.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fake registry's account: (evictions of `pid`'s managed bytes, its
/// resident managed bytes), from tests/fake's dump.
fn fake_dump(reg: &Path) -> String {
    let o = Command::new(repo().join("tests/fake/build/fake-registry-dump"))
        .arg(reg)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Admission sums guarantees only: two 4g..16g bursters and an 8g slice
/// fill a 16 GiB GPU; a fourth guarantee is refused; a burster then
/// allocates 12 GiB, 8 of them lent as managed memory, and its memory
/// queries show its limit. (Before bursts, vram-limit was an unknown key:
/// the burster was refused past 4 GiB.)
#[test]
fn admission_sums_guarantees_and_a_burster_allocates_past_its_guarantee() {
    require_e2e!();
    let g = Gpu::new("adm", "");
    let burst = [("vram", "4g"), ("vram-limit", "16g"), ("gpu", "0")];
    for id in ["b1", "b2"] {
        let b = g.bundle(id, &burst, "sleep 600", &[]);
        assert_ok(
            &g.h.runtime(&["create", "--bundle", &b.bundle_arg(), id]),
            id,
        );
    }
    let c = g.bundle("c", &[("vram", "8g"), ("gpu", "0")], "sleep 600", &[]);
    assert_ok(
        &g.h.runtime(&["create", "--bundle", &c.bundle_arg(), "c"]),
        "c",
    );
    let d = g.bundle("d", &[("vram", "1g"), ("gpu", "0")], "true", &[]);
    let o = g.h.runtime(&["create", "--bundle", &d.bundle_arg(), "d"]);
    assert!(!o.status.success(), "a fourth guarantee fits nowhere");
    assert!(stderr(&o).contains("are free"), "{}", stderr(&o));
    for id in ["b1", "b2", "c"] {
        g.h.runtime(&["delete", "--force", id]);
    }
    // alone on the GPU, a burster allocates 4 + 8 GiB and sees 16 GiB total
    let b = g.bundle(
        "solo",
        &burst,
        "nvidia-smi > /out/smi 2>&1; cuda_probe info > /out/info 2>&1; cuda_probe alloc 4 8 > /out/log 2>&1; touch /out/done",
        &[],
    );
    assert_ok(
        &g.h.runtime(&["run", "--bundle", &b.bundle_arg(), "solo"]),
        "run",
    );
    let log = b.wait_out("log", 5).unwrap();
    assert!(log.contains("alloc 4 GiB rc=0\nalloc 8 GiB rc=0"), "{log}");
    let smi = b.wait_out("smi", 5).unwrap();
    assert!(
        smi.contains("16384 MiB, the container's burst limit over a guarantee of 4096 MiB"),
        "{smi}"
    );
    let info = b.wait_out("info", 5).unwrap();
    assert!(info.contains(&format!("total={}", 16 * GIB)), "{info}");
}

/// A burst is lent only from free memory: past the GPU's free memory, and
/// past the limit, it is refused, each with its line; within them it is
/// managed memory resident on the GPU.
#[test]
fn a_burst_is_lent_within_free_memory_and_the_limit() {
    require_e2e!();
    let g = Gpu::new("free", "");
    let _reaper = Reaper::start(g.registry());
    // a guaranteed container holds 6 of its 8 GiB
    let a = g.bundle(
        "a",
        &[("vram", "8g"), ("gpu", "0")],
        "cuda_probe keep 6 /out > /out/log 2>&1",
        &[],
    );
    let mut ca = g.run(&a, "a");
    a.wait_out("held", 20).expect("a holds 6 GiB");
    // 2 guaranteed + 7 lent fit the 10 GiB free; 2 more are past the free
    // memory (1 GiB), though within the limit
    let b = g.bundle(
        "b",
        &[("vram", "2g"), ("vram-limit", "12g"), ("gpu", "0")],
        "cuda_probe keep 2 /out/k > /out/log 2>&1 & sleep 1; cuda_probe hold 7 2 600 > /out/burst 2>&1 & sleep 600",
        &[],
    );
    std::fs::create_dir_all(b.out.join("k")).unwrap();
    let mut cb = g.run(&b, "b");
    wait_until(20, "b's burst", || {
        std::fs::read_to_string(b.out.join("burst")).is_ok_and(|l| l.contains("alloc 2 GiB rc="))
    });
    let burst = b.wait_out("burst", 1).unwrap();
    assert!(
        burst.contains("alloc 7 GiB rc=0\n") && burst.contains("alloc 2 GiB rc=2"),
        "{burst}"
    );
    assert!(
        burst.contains("above this container's guarantee on GPU 0, and memory above a guarantee is lent only from what the GPU has free"),
        "{burst}"
    );
    let dump = fake_dump(&g.registry());
    assert!(
        dump.contains("managed_resident=7516192768"),
        "7 GiB lent as managed memory: {dump}"
    );
    for (id, ch) in [("a", &mut ca), ("b", &mut cb)] {
        g.h.runtime(&["kill", id, "KILL"]);
        let _ = ch.wait();
        g.h.runtime(&["delete", "--force", id]);
    }
    // the driver frees a killed container's memory (the reaper, here)
    wait_until(10, "a and b's memory freed", || {
        fake_dump(&g.registry())
            .lines()
            .any(|l| l.starts_with("dev 0 ") && l.contains(" in_use=0 "))
    });
    // past the limit, on an empty GPU: refused with the limit in the line
    let c = g.bundle(
        "c",
        &[("vram", "1g"), ("vram-limit", "2g"), ("gpu", "0")],
        "cuda_probe alloc 1 1 1 > /out/log 2>&1",
        &[],
    );
    assert_ok(
        &g.h.runtime(&["run", "--bundle", &c.bundle_arg(), "c"]),
        "c",
    );
    let log = c.wait_out("log", 5).unwrap();
    assert!(
        log.contains("alloc 1 GiB rc=0\nalloc 1 GiB rc=0\n")
            && log.contains("alloc 1 GiB rc=2")
            && log.contains("refused: burst limit 2.00 GiB on GPU 0"),
        "{log}"
    );
}

/// A guaranteed allocation gets its memory while a burster holds it: the
/// driver moves the burster's lent pages to host memory, and the burster
/// runs on. (Before bursts, the burster's memory was ordinary and could not
/// be lent at all.)
#[test]
fn a_guaranteed_allocation_takes_its_memory_back_from_a_burster() {
    require_e2e!();
    let g = Gpu::new("evict", "");
    let b = g.bundle(
        "b",
        &[("vram", "2g"), ("vram-limit", "14g"), ("gpu", "0")],
        "cuda_probe hold 2 12 600 > /out/log 2>&1",
        &[],
    );
    let mut cb = g.run(&b, "b");
    wait_until(20, "b's 14 GiB", || {
        std::fs::read_to_string(b.out.join("log")).is_ok_and(|l| l.contains("alloc 12 GiB rc=0"))
    });
    let a = g.bundle(
        "a",
        &[("vram", "12g"), ("gpu", "0")],
        "cuda_probe alloc 10 > /out/log 2>&1",
        &[],
    );
    assert_ok(
        &g.h.runtime(&["run", "--bundle", &a.bundle_arg(), "a"]),
        "a",
    );
    let log = a.wait_out("log", 5).unwrap();
    assert!(log.contains("alloc 10 GiB rc=0"), "{log}");
    let dump = fake_dump(&g.registry());
    assert!(dump.contains("evictions "), "{dump}");
    assert!(cb.try_wait().unwrap().is_none(), "the burster runs on");
    g.h.runtime(&["kill", "b", "KILL"]);
    let _ = cb.wait();
    g.h.runtime(&["delete", "--force", "b"]);
}

/// Where the driver cannot move lent memory (host memory full), the
/// guaranteed allocation waits and `gpu-quota burst-supervise` ends
/// bursters: the lowest priority first, then the newest; each gets one
/// line on its stderr and exit status 137; the higher priority and the
/// guaranteed container run on, and the event log names each end.
#[test]
fn where_the_driver_cannot_the_supervisor_ends_bursters_in_order() {
    require_e2e!();
    let g = Gpu::new("order", "burst_reclaim_wait_ms = 15000\n");
    // one byte of host memory for evicted pages: the driver can move none
    let host_full = ["FAKE_CUDA_HOST_BYTES=1"];
    let _reaper = Reaper::start(g.registry());
    // the next burster is ended only after the last one's memory had time
    // to go (the default settle): the reaper frees it within ~0.5 s here,
    // the driver in 1.1 s on the H200; under load 300 ms ended one too many
    let mut sup = Supervisor(
        Command::new(bin("gpu-quota"))
            .env("GPU_QUOTA_CONFIG", g.h.config())
            .args([
                "burst-supervise",
                "--interval-ms",
                "50",
                "--settle-ms",
                "2000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut bursters = vec![];
    for (id, prio) in [("old", "0"), ("new", "0"), ("hi", "100")] {
        let b = g.bundle(
            id,
            &[
                ("vram", "1g"),
                ("vram-limit", "5g"),
                ("vram-priority", prio),
                ("gpu", "0"),
            ],
            "cuda_probe hold 1 4 600 > /out/log",
            &host_full,
        );
        let c = g.run(&b, id);
        wait_until(20, id, || {
            std::fs::read_to_string(b.out.join("log")).is_ok_and(|l| l.contains("alloc 4 GiB rc=0"))
        });
        bursters.push((id, c));
    }
    // 15 of 16 GiB lent; the guaranteed container needs 5, then 4 more
    let a = g.bundle(
        "a",
        &[("vram", "10g"), ("gpu", "0")],
        "while [ ! -e /out/go ]; do sleep 0.05; done; cuda_probe alloc 5 4 > /out/log 2>&1",
        &host_full,
    );
    let mut ca = g.run(&a, "a");
    wait_until(10, "the supervisor's word in a's grant", || {
        word(&g.h, "a") == Some(15_000)
    });
    std::fs::write(a.out.join("go"), b"").unwrap();
    let st = ca.wait().unwrap();
    let log = std::fs::read_to_string(a.out.join("log")).unwrap();
    if !log.contains("alloc 4 GiB rc=0") {
        panic!("{log}\nsupervisor: {}", sup.stop());
    }
    assert!(st.success(), "the guaranteed container ends well: {log}");
    assert!(log.contains("alloc 5 GiB rc=0\nalloc 4 GiB rc=0"), "{log}");
    let mut ended = vec![];
    for (id, mut c) in bursters {
        if id == "hi" {
            assert!(
                c.try_wait().unwrap().is_none(),
                "the higher priority runs on"
            );
            g.h.runtime(&["kill", id, "KILL"]);
            let _ = c.wait();
        } else {
            let gone = (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(100));
                c.try_wait().unwrap().is_some()
            });
            if !gone {
                g.h.runtime(&["kill", id, "KILL"]);
            }
            let o = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert_eq!(o.status.code(), Some(137), "{id}: {err}");
            assert!(
                err.contains("gpu-quota: container ended: it held 4.00 GiB above its guarantee of 1.00 GiB on GPU 0")
                    && err.contains("vram-priority 0"),
                "{id}: {err}"
            );
            ended.push(id);
        }
        g.h.runtime(&["delete", "--force", id]);
    }
    assert_eq!(ended.len(), 2);
    let log = std::fs::read_to_string(g.h.path().join("gq.log")).unwrap();
    let ends: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"event\":\"burst_reclaim\""))
        .collect();
    assert_eq!(ends.len(), 2, "{log}");
    assert!(
        ends[0].contains("\"container_id\":\"new\"")
            && ends[1].contains("\"container_id\":\"old\""),
        "newest first: {ends:?}"
    );
    assert!(
        ends.iter().all(|l| l.contains("\"needed_by\":\"a\"")),
        "{ends:?}"
    );
    let m = String::from_utf8_lossy(&g.gq(&["metrics"]).stdout).into_owned();
    assert!(m.contains("gpu_quota_burst_ends_total"), "{m}");
    sup.stop();
    g.h.runtime(&["delete", "--force", "a"]);
}
