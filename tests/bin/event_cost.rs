//! Benchmark (not a test): the cost of recording one event
//! (`gpuquota_core::events::admitted`) with `log = "off"` (counters only)
//! and `log = "file"` (counters + one JSON line), interleaved in rounds.
//! Usage: event-cost [ROUNDS] [PER_ROUND] — prints µs per call, median of rounds.
use gpuquota_core::config::{Config, LogTarget};
use gpuquota_core::events::{self, Source};
use gpuquota_core::ledger::{ResState, Reservation};
use gpuquota_core::placement::Slice;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(21);
    let per: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let d = tempfile::tempdir().unwrap();
    let cfg = |log| Config {
        ledger_dir: d.path().join("ledger"),
        log,
        log_file: d.path().join("gq.log"),
        ..Config::default()
    };
    let (off, file) = (cfg(LogTarget::Off), cfg(LogTarget::File));
    let slice = Slice::memory("GPU-0".into(), 0, 1 << 30);
    let r = Reservation {
        pid: Some(1),
        state: ResState::Running,
        ..Reservation::new(
            "bench",
            Some("/run/runc"),
            "/b",
            vec![slice],
            "vram=1.00 GiB",
        )
    };
    let src = Source {
        program: "event-cost",
        engine: "runc",
        cause: "bench",
    };
    let time = |c: &Config| {
        let t = Instant::now();
        for _ in 0..per {
            events::admitted(c, src, &r);
        }
        t.elapsed().as_secs_f64() * 1e6 / per as f64
    };
    let (mut a, mut b) = (vec![], vec![]);
    for i in 0..rounds {
        if i % 2 == 0 {
            a.push(time(&off));
            b.push(time(&file));
        } else {
            b.push(time(&file));
            a.push(time(&off));
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
        v[v.len() / 2]
    };
    let lines = std::fs::read_to_string(d.path().join("gq.log"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines, rounds * per, "one line per call with log = file");
    let (ma, mb) = (med(&mut a), med(&mut b));
    println!(
        "per event: log=off (counters only) {ma:.1} µs, log=file {mb:.1} µs, the line itself {:+.1} µs ({rounds} rounds × {per})",
        mb - ma
    );
}
