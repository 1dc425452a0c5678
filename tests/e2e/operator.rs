//! The exporter scraped over
//! loopback while containers start and stop (parsed with a real
//! Prometheus text parser), counters across an exporter restart, the
//! event log lines, `release` and `gc` on reservations of real containers
//! (one SIGKILLed), and `top` driven in tmux.
use gpu_quota_e2e::*;
use openmetrics_parser::{prometheus::parse_prometheus, PrometheusType, PrometheusValue};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A host whose event lines go to its `gq.log` (the harness sets
/// `log_file`; `log = "file"` makes it independent of journald here).
fn host() -> (Host, PathBuf) {
    let h = Host::new(HostOpts {
        extra_config: "log = \"file\"\n".into(),
        ..Default::default()
    });
    let log = h.path().join("gq.log");
    (h, log)
}

fn gq_cmd(h: &Host, args: &[&str]) -> Command {
    let mut c = Command::new(bin("gpu-quota"));
    c.env("GPU_QUOTA_CONFIG", h.config()).args(args);
    c
}

fn gq(h: &Host, args: &[&str], stdin: &str) -> Output {
    let mut c = gq_cmd(h, args);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut ch = c.spawn().unwrap();
    // a command that answers without reading its stdin may exit first
    match ch.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.unwrap(),
    }
    ch.wait_with_output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn log_lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("log line {l:?}: {e}")))
        .collect()
}

fn events_of<'a>(l: &'a [Value], event: &str, id: &str) -> Vec<&'a Value> {
    l.iter()
        .filter(|v| v["event"] == event && v["container_id"] == id)
        .collect()
}

fn wait_stopped(h: &Host, id: &str) {
    for _ in 0..100 {
        if String::from_utf8_lossy(&h.runc(&["state", id]).stdout).contains("stopped") {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{id} did not stop");
}

/// GET `path`: (status, content type, body).
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("HTTP response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

type Labels = BTreeMap<String, String>;
/// family name -> (type, samples)
type Parsed = BTreeMap<String, (PrometheusType, Vec<(Labels, f64)>)>;

/// Parse with a real Prometheus text-format parser; panics on any error.
fn parse(text: &str) -> Parsed {
    let exp = parse_prometheus(text).unwrap_or_else(|e| panic!("{e:?} in\n{text}"));
    let mut m = Parsed::new();
    for (name, fam) in &exp.families {
        let names = fam.get_label_names().to_vec();
        let samples = fam
            .iter_samples()
            .map(|s| {
                let ls = s.get_labelset().unwrap();
                let labels = names
                    .iter()
                    .map(|n| (n.clone(), ls.get_label_value(n).unwrap_or("").to_string()))
                    .collect();
                let v = match &s.value {
                    PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
                    PrometheusValue::Counter(c) => c.value.as_f64(),
                    other => panic!("unexpected value {other:?}"),
                };
                (labels, v)
            })
            .collect();
        m.insert(name.clone(), (fam.family_type.clone(), samples));
    }
    m
}

fn scrape(addr: &str) -> Parsed {
    let (status, ctype, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    parse(&body)
}

/// The value of `family` whose labels include `want`; None when absent.
fn value(p: &Parsed, family: &str, want: &[(&str, &str)]) -> Option<f64> {
    let (_, samples) = p.get(family)?;
    samples
        .iter()
        .find(|(l, _)| {
            want.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
}

fn counter(p: &Parsed, family: &str, want: &[(&str, &str)]) -> f64 {
    let (t, _) = p.get(family).unwrap_or_else(|| panic!("{family} missing"));
    assert_eq!(*t, PrometheusType::Counter, "{family}");
    value(p, family, want).unwrap_or(0.0)
}

fn create(h: &Host, id: &str, ann: &[(&str, &str)]) -> Output {
    let b = h.bundle(id);
    b.set(ann, "sleep 600", &[]);
    h.runtime(&["create", "--bundle", &b.bundle_arg(), id])
}

#[test]
fn exporter_is_scraped_while_real_containers_start_and_stop() {
    require_e2e!();
    let (h, log) = host();
    let ex = Exporter::start(&h);
    let (code, _, body) = get(&ex.addr, "/healthz");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    assert_eq!(get(&ex.addr, "/nope").0, 404);

    let p = scrape(&ex.addr);
    assert_eq!(value(&p, "gpu_quota_ledger_ok", &[]), Some(1.0));
    let g0 = [("gpu", "0"), ("uuid", &uuid(0)[..])];
    assert_eq!(
        value(&p, "gpu_quota_gpu_capacity_bytes", &g0),
        Some((16 * GIB) as f64)
    );
    assert_eq!(value(&p, "gpu_quota_gpu_reserved_bytes", &g0), Some(0.0));
    assert_eq!(counter(&p, "gpu_quota_admissions_total", &[]), 0.0);
    assert_eq!(
        value(
            &p,
            "gpu_quota_gpu_info",
            &[("gpu", "1"), ("UUID", &uuid(1)[..])]
        ),
        Some(1.0),
        "DCGM's label names"
    );

    // a scraper runs the whole time containers come and go
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let (addr, stop) = (ex.addr.clone(), stop.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst)
                && t.elapsed() < Duration::from_secs(120)
                && n < 10_000
            {
                let p = scrape(&addr);
                assert!(p.contains_key("gpu_quota_gpu_reserved_bytes"));
                n += 1;
            }
            n
        })
    };

    let o = create(&h, "c1", &[("vram", "4g"), ("gpu", "0")]);
    assert_ok(&o, "create c1");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("admission")
            && !String::from_utf8_lossy(&o.stdout).contains("admission"),
        "events never go to the runtime's (the container's) stdio"
    );
    assert_ok(&h.runtime(&["start", "c1"]), "start c1");
    assert_ok(
        &create(&h, "c2", &[("vram", "6g"), ("gpu", "0")]),
        "create c2",
    );
    let o = create(&h, "big", &[("vram", "20g")]);
    assert!(!o.status.success(), "20g does not fit a 16g GPU");
    let o = create(&h, "full", &[("vram", "8g"), ("gpu", "0")]);
    assert!(!o.status.success(), "GPU 0 has 6g left");
    let o = create(&h, "bad", &[("vram", "lots")]);
    assert!(!o.status.success());

    let p = scrape(&ex.addr);
    assert_eq!(
        value(&p, "gpu_quota_gpu_reserved_bytes", &g0),
        Some((10 * GIB) as f64)
    );
    assert_eq!(value(&p, "gpu_quota_gpu_containers", &g0), Some(2.0));
    for (id, bytes) in [("c1", 4), ("c2", 6)] {
        assert_eq!(
            value(
                &p,
                "gpu_quota_container_slice_bytes",
                &[("container", id), ("gpu", "0")]
            ),
            Some((bytes * GIB) as f64),
            "{id}"
        );
        assert!(value(&p, "gpu_quota_container_age_seconds", &[("container", id)]).is_some());
        assert_eq!(
            value(
                &p,
                "gpu_quota_container_info",
                &[("container", id), ("state", "running"), ("engine", "runc")]
            ),
            Some(1.0)
        );
    }
    assert_eq!(counter(&p, "gpu_quota_admissions_total", &[]), 2.0);
    for reason in ["too_large", "does_not_fit", "invalid_request"] {
        assert_eq!(
            counter(
                &p,
                "gpu_quota_admission_refusals_total",
                &[("reason", reason)]
            ),
            1.0,
            "{reason}"
        );
    }

    // c1 stops and is deleted: its slice leaves the scrape
    assert_ok(&h.runtime(&["kill", "c1", "KILL"]), "kill c1");
    wait_stopped(&h, "c1");
    assert_ok(&h.runtime(&["delete", "c1"]), "delete c1");
    let p = scrape(&ex.addr);
    assert_eq!(
        value(
            &p,
            "gpu_quota_container_slice_bytes",
            &[("container", "c1")]
        ),
        None
    );
    assert_eq!(
        value(&p, "gpu_quota_gpu_reserved_bytes", &g0),
        Some((6 * GIB) as f64)
    );
    assert_eq!(counter(&p, "gpu_quota_releases_total", &[]), 1.0);
    // a new container takes the room
    assert_ok(
        &create(&h, "c3", &[("vram", "8g"), ("gpu", "0")]),
        "create c3",
    );

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let n = scraper.join().expect("every concurrent scrape parsed");
    assert!(n >= 5, "only {n} scrapes during the run");

    // counters survive a restart of the exporter
    let before = scrape(&ex.addr);
    drop(ex);
    let ex = Exporter::start(&h);
    let after = scrape(&ex.addr);
    for f in [
        "gpu_quota_admissions_total",
        "gpu_quota_releases_total",
        "gpu_quota_reclaims_total",
    ] {
        assert_eq!(counter(&before, f, &[]), counter(&after, f, &[]), "{f}");
    }
    assert_eq!(counter(&after, "gpu_quota_admissions_total", &[]), 3.0);
    assert_eq!(
        counter(
            &after,
            "gpu_quota_admission_refusals_total",
            &[("reason", "does_not_fit")]
        ),
        1.0
    );

    // the dashboard and the alert rules use only series the exporter has
    let dash = std::fs::read_to_string(repo_dir().join("deploy/grafana/gpu-quota.json")).unwrap();
    let d: Value = serde_json::from_str(&dash).expect("dashboard is JSON");
    assert!(d["panels"].as_array().unwrap().len() >= 4);
    let rules = std::fs::read_to_string(repo_dir().join("deploy/prometheus-rules.yml")).unwrap();
    let mut used = 0;
    for text in [&dash, &rules] {
        for (i, _) in text.match_indices("gpu_quota_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(after.contains_key(&name), "{name} is not exported");
            used += 1;
        }
    }
    assert!(used > 10);

    // the event log: one line per admission, refusal and release
    h.cleanup();
    let l = log_lines(&log);
    let a = events_of(&l, "admission", "c1");
    assert_eq!(a.len(), 1, "{l:?}");
    assert_eq!(a[0]["gpu"], "0");
    assert_eq!(a[0]["uuid"], uuid(0));
    assert_eq!(a[0]["slice_bytes"], 4 * GIB);
    assert_eq!(a[0]["engine"], "runc");
    assert_eq!(a[0]["program"], "gpu-quota-runtime");
    let r = events_of(&l, "refusal", "full");
    assert_eq!(r.len(), 1, "{l:?}");
    assert_eq!(r[0]["reason"], "does_not_fit");
    assert!(
        r[0]["message"].as_str().unwrap().contains("only 6.00 GiB"),
        "{r:?}"
    );
    assert_eq!(
        events_of(&l, "refusal", "bad")[0]["reason"],
        "invalid_request"
    );
    assert_eq!(events_of(&l, "refusal", "big")[0]["reason"], "too_large");
    let rel = events_of(&l, "release", "c1");
    assert_eq!(
        rel.len(),
        1,
        "released once, not by both hook and runtime: {rel:?}"
    );
    assert_eq!(rel[0]["slice_bytes"], 4 * GIB);
    for id in ["c2", "c3"] {
        assert_eq!(events_of(&l, "release", id).len(), 1, "{id} at cleanup");
    }
}

#[test]
fn a_pods_names_from_the_cri_annotations_are_in_ls_the_metrics_and_the_events() {
    require_e2e!();
    let (h, log) = host();
    let pod = [
        ("vram", "2g"),
        ("io.kubernetes.cri.sandbox-namespace", "ml"),
        ("io.kubernetes.cri.sandbox-name", "train-0"),
        (
            "io.kubernetes.cri.sandbox-uid",
            "6f1c2a7e-0d4b-4e8a-9c1d-2b3a4c5d6e7f",
        ),
        ("io.kubernetes.cri.container-name", "trainer"),
    ];
    assert_ok(&create(&h, "podc", &pod), "pod's container");
    // a forged name with a terminal escape is not shown
    assert_ok(
        &create(
            &h,
            "evil",
            &[
                ("vram", "1g"),
                ("io.kubernetes.cri.sandbox-name", "x\u{1b}]0;owned\u{7}"),
            ],
        ),
        "evil",
    );
    let ls = out(&gq(&h, &["ls"], ""));
    let line = ls.lines().find(|l| l.starts_with("podc")).expect(&ls);
    assert!(line.ends_with("ml/train-0/trainer"), "{ls}");
    assert!(!ls.contains('\u{1b}') && !ls.contains("owned"), "{ls:?}");
    let json: Value = serde_json::from_str(&out(&gq(&h, &["ls", "--json"], ""))).unwrap();
    let r = json["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["container_id"] == "podc")
        .unwrap();
    assert_eq!(r["workload"]["pod"], "train-0");
    let m = parse(&out(&gq(&h, &["metrics"], "")));
    let want = [
        ("container", "podc"),
        ("namespace", "ml"),
        ("pod", "train-0"),
        ("pod_uid", "6f1c2a7e-0d4b-4e8a-9c1d-2b3a4c5d6e7f"),
        ("container_name", "trainer"),
        ("gpu", "0"),
    ];
    assert_eq!(
        value(&m, "gpu_quota_container_slice_bytes", &want),
        Some((2u64 << 30) as f64)
    );
    let ev = log_lines(&log);
    let a = events_of(&ev, "admission", "podc");
    assert_eq!(a.len(), 1, "{ev:?}");
    assert_eq!(
        (&a[0]["namespace"], &a[0]["pod"]),
        (&"ml".into(), &"train-0".into())
    );
    for id in ["podc", "evil"] {
        let _ = h.runtime(&["delete", "--force", id]);
    }
}

#[test]
fn release_and_gc_on_real_containers_one_sigkilled() {
    require_e2e!();
    let (h, log) = host();
    for id in ["live", "killed", "crashed"] {
        assert_ok(&create(&h, id, &[("vram", "4g")]), id);
        assert_ok(&h.runtime(&["start", id]), id);
    }
    let pid_of = |id: &str| -> u32 {
        h.reservations()
            .iter()
            .find(|r| r["container_id"] == id)
            .and_then(|r| r["pid"].as_u64())
            .unwrap() as u32
    };
    // a running container: refused without --force, whatever the answer
    for args in [&["release", "live"][..], &["release", "live", "--yes"]] {
        let o = gq(&h, args, "y\n");
        assert!(!o.status.success(), "{args:?}: {}", out(&o));
        assert!(stderr(&o).contains("still running"), "{}", stderr(&o));
    }
    assert_eq!(h.reservations().len(), 3);
    let o = gq(&h, &["release", "nosuch", "--yes"], "");
    assert!(!o.status.success() && stderr(&o).contains("no reservation"));

    // `killed`: its process SIGKILLed from the host, the container never deleted
    let kpid = pid_of("killed");
    // SAFETY: plain kill(2) of the container's init, which we started.
    assert_eq!(unsafe { libc::kill(kpid as i32, libc::SIGKILL) }, 0);
    wait_stopped(&h, "killed");
    let o = gq(&h, &["release", "killed"], "n\n");
    assert!(!o.status.success() && stderr(&o).contains("not released"));
    let o = gq(&h, &["release", "killed"], "");
    assert!(!o.status.success(), "no answer (stdin at EOF) is a no");
    assert_eq!(h.reservations().len(), 3, "nothing released without a yes");
    let o = gq(&h, &["release", "killed"], "y\n");
    assert_ok(&o, "release killed");
    let rel_line = out(&o);
    assert_eq!(
        rel_line,
        format!("released killed (4.00 GiB on GPU 0, pid {kpid} gone)\n")
    );
    assert!(h
        .reservations()
        .iter()
        .all(|r| r["container_id"] != "killed"));
    let dirs: Vec<String> = std::fs::read_dir(h.path().join("state/containers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!dirs.iter().any(|d| d.starts_with("killed-")), "{dirs:?}");

    // `crashed`: runc kills it, gc reclaims it with the same kind of line
    let cpid = pid_of("crashed");
    assert_ok(&h.runc(&["kill", "crashed", "KILL"]), "kill");
    wait_stopped(&h, "crashed");
    let o = gq(&h, &["gc"], "");
    assert_ok(&o, "gc");
    assert!(
        out(&o).starts_with(&format!(
            "reclaimed crashed (4.00 GiB on GPU 0, pid {cpid} gone)\n"
        )),
        "{}",
        out(&o)
    );
    assert_eq!(h.reservations().len(), 1);

    // --force releases a running container's slice; it keeps running
    let lpid = pid_of("live");
    let o = gq(&h, &["release", "live", "--force", "--yes"], "");
    assert_ok(&o, "release --force");
    assert_eq!(
        out(&o),
        format!("released live (4.00 GiB on GPU 0, pid {lpid} still running)\n")
    );
    assert!(h.reservations().is_empty());
    assert!(String::from_utf8_lossy(&h.runc(&["state", "live"]).stdout).contains("running"));
    h.cleanup();
    // the engine's delete of the force-released container still removes its
    // state directory and unmounts its tmpfs (its reservation is gone)
    let left: Vec<String> = std::fs::read_dir(h.path().join("state/containers"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "state left after delete: {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let prefix = format!(" {}/", h.path().display());
    assert!(
        !mounts.lines().any(|l| l.contains(&prefix)),
        "mounts left under {}: {mounts}",
        h.path().display()
    );

    let l = log_lines(&log);
    let r = events_of(&l, "release", "killed");
    assert_eq!(r.len(), 1, "{l:?}");
    assert_eq!(
        (&r[0]["program"], &r[0]["cause"]),
        (&"gpu-quota".into(), &"operator".into())
    );
    assert_eq!(r[0]["pid"], kpid);
    let g = events_of(&l, "reclaim", "crashed");
    assert_eq!(g.len(), 1, "{l:?}");
    assert_eq!(g[0]["cause"], "gc");
    assert_eq!(g[0]["slice_bytes"], 4 * GIB);
    assert_eq!(
        events_of(&l, "release", "live").len(),
        1,
        "the forced release counts; the later delete finds nothing to release"
    );
    let c = gpuquota_core::counters::read(&h.path().join("ledger")).unwrap();
    assert_eq!((c.admissions, c.releases, c.reclaims), (3, 2, 1));
}

/// A tmux server of our own: its socket and temp files live in a temp dir of
/// this test (`-S`, `TMUX_TMPDIR`), never in the host's /tmp/tmux-UID.
struct Tmux {
    dir: tempfile::TempDir,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn command(&self) -> Command {
        let mut c = Command::new("tmux");
        c.env("TMUX_TMPDIR", self.dir.path())
            .arg("-S")
            .arg(self.dir.path().join("sock"));
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        let o = self
            .command()
            .args(args)
            .output()
            .expect("tmux (apt-get install tmux)");
        assert!(o.status.success(), "tmux {args:?}: {}", stderr(&o));
        o
    }
    fn capture(&self) -> String {
        out(&self.run(&["capture-pane", "-p", "-t", "top"]))
    }
    fn wait_for(&self, what: &dyn Fn(&str) -> bool, secs: u64) -> String {
        let t = Instant::now();
        loop {
            let s = self.capture();
            if what(&s) || t.elapsed() > Duration::from_secs(secs) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

#[test]
fn top_in_tmux_refreshes_and_quits_on_q_and_ctrl_c() {
    require_e2e!();
    if harness_which("tmux").is_none() {
        if std::env::var("GPU_QUOTA_E2E").as_deref() == Ok("1") {
            panic!("tmux not installed (apt-get install tmux)");
        }
        eprintln!("skipping: tmux not installed");
        return;
    }
    let (h, _log) = host();
    let logs = tempfile::tempdir().unwrap();
    assert_ok(
        &create(&h, "alpha", &[("vram", "4g"), ("gpu", "0")]),
        "alpha",
    );
    for (n, key) in [(0, "q"), (1, "C-c")] {
        let t = Tmux::new();
        let done = logs.path().join(format!("exit{n}"));
        let cmd = format!(
            "GPU_QUOTA_CONFIG={} {} top; echo $? > {}; sleep 60",
            h.config().display(),
            bin("gpu-quota").display(),
            done.display()
        );
        t.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "140",
            "-y",
            "30",
            &cmd,
        ]);
        let s = t.wait_for(&|s| s.contains("alpha"), 20);
        assert!(s.contains("GPU 0") && s.contains("GPU 1"), "{s}");
        let reserved = if n == 0 { "4.00" } else { "12.00" };
        assert!(
            s.contains(&format!("{reserved} GiB reserved of 16.00 GiB")),
            "{s}"
        );
        assert!(s.contains("slices   ####"), "a bar of alpha's slice: {s}");
        let row = s.lines().find(|l| l.contains("alpha")).unwrap();
        assert!(row.contains("running") && row.contains("4.00 GiB"), "{row}");
        if n == 0 {
            // refreshed: a container created now shows up within seconds
            assert_ok(&create(&h, "beta", &[("vram", "8g"), ("gpu", "0")]), "beta");
            let s = t.wait_for(&|s| s.contains("beta"), 5);
            assert!(s.contains("12.00 GiB reserved of 16.00 GiB"), "{s}");
            assert!(s.contains("########========"), "two slices in one bar: {s}");
        }
        t.run(&["send-keys", "-t", "top", key]);
        let t0 = Instant::now();
        while !done.exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let code =
            std::fs::read_to_string(&done).unwrap_or_else(|_| panic!("top did not exit on {key}"));
        assert_eq!(code.trim(), "0", "clean exit on {key}");
        let s = t.capture();
        assert!(!s.contains("slices"), "the terminal was restored: {s}");
    }
    // not a terminal: one plain-text frame
    let o = gq(&h, &["top"], "");
    assert_ok(&o, "top to a pipe");
    let s = out(&o);
    assert!(
        s.contains("alpha") && s.contains("beta") && s.contains("slices ["),
        "{s}"
    );
    assert!(!s.contains('\x1b'), "no escape sequences: {s:?}");
}

fn harness_which(name: &str) -> Option<PathBuf> {
    which(name)
}

#[test]
fn events_go_to_journald_when_its_socket_exists() {
    require_e2e!();
    // a private mount namespace where /run/systemd/journal/socket is a
    // datagram socket of this test (the host's /run is not touched)
    let h = Host::new(HostOpts::default()); // log = "auto"
    let sockdir = tempfile::Builder::new()
        .prefix("gq-journal-")
        .tempdir()
        .unwrap();
    let sock = std::os::unix::net::UnixDatagram::bind(sockdir.path().join("socket")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // a reservation whose process is gone, for `release` to give back
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let ledger = serde_json::json!({"version": 1, "reservations": [{
        "container_id": "gone1", "runtime_root": h.runc_root, "bundle": "/nonexistent",
        "slices": [{"uuid": uuid(1), "index": 1, "bytes": 2 * GIB}], "request": "vram=2.00 GiB",
        "created_unix": 1, "started_unix": 1, "pid": dead, "pid_start": 1, "state": "running"}]});
    std::fs::write(h.ledger_path(), serde_json::to_vec(&ledger).unwrap()).unwrap();
    let script = format!(
        "mount --make-rprivate / && mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && \
         mount --bind {} /run/systemd/journal && exec {} release gone1 --yes",
        sockdir.path().display(),
        bin("gpu-quota").display()
    );
    let mut c = Command::new("unshare");
    c.args(["-m", "sh", "-c", &script])
        .env("GPU_QUOTA_CONFIG", h.config());
    let o = capture(c);
    assert_ok(&o, "release under a journald socket");
    assert!(
        out(&o).contains("released gone1 (2.00 GiB on GPU 1"),
        "{}",
        out(&o)
    );
    // the layer's empty probe datagram, then the entry
    let mut buf = vec![0u8; 65536];
    let mut n = 0;
    for _ in 0..3 {
        n = sock.recv(&mut buf).expect("a journal datagram");
        if n > 0 {
            break;
        }
    }
    let msg = journal_fields(&buf[..n]).join("\n");
    for field in [
        "EVENT=release",
        "CONTAINER_ID=gone1",
        "SYSLOG_IDENTIFIER=gpu-quota",
        "CAUSE=operator",
        "GPU=1",
        &format!("SLICE_BYTES={}", 2 * GIB),
        "PRIORITY=5", // tracing-journald maps INFO to notice
    ] {
        assert!(msg.lines().any(|l| l == field), "{field} in {msg:?}");
    }
    assert!(
        !h.path().join("gq.log").exists(),
        "with journald present nothing goes to the log file"
    );
}

/// The fields of a journald native-protocol datagram as `NAME=value`
/// (plain `NAME=value\n`, or `NAME\n<u64 LE length><value>\n`).
fn journal_fields(mut b: &[u8]) -> Vec<String> {
    let mut out = vec![];
    while !b.is_empty() {
        let end = b
            .iter()
            .position(|c| *c == b'=' || *c == b'\n')
            .expect("field name");
        let name = String::from_utf8_lossy(&b[..end]).into_owned();
        if b[end] == b'=' {
            let rest = &b[end + 1..];
            let nl = rest.iter().position(|c| *c == b'\n').unwrap_or(rest.len());
            out.push(format!("{name}={}", String::from_utf8_lossy(&rest[..nl])));
            b = &rest[(nl + 1).min(rest.len())..];
        } else {
            let len = u64::from_le_bytes(b[end + 1..end + 9].try_into().unwrap()) as usize;
            let v = &b[end + 9..end + 9 + len];
            out.push(format!("{name}={}", String::from_utf8_lossy(v)));
            b = &b[(end + 10 + len).min(b.len())..];
        }
    }
    out
}
