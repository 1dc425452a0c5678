//! A crash (kill -9) at every step of a ledger write
//! leaves a parseable ledger holding exactly the committed reservations.
use gpuquota_core::fsutil::WriteStep;
use gpuquota_core::fsutil::WRITE_STEPS;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn ids(dir: &std::path::Path) -> Vec<String> {
    let bytes = std::fs::read(dir.join("ledger.json")).expect("ledger exists");
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("ledger parses after a crash");
    v["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["container_id"].as_str().unwrap().to_string())
        .collect()
}

fn stepper(dir: &std::path::Path, id: &str, step: Option<usize>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ledger-stepper"));
    c.arg(dir).arg(id);
    if let Some(s) = step {
        c.arg(s.to_string());
    }
    c
}

/// Run `c` until it reports reaching its step (`at-step`), then kill -9 it.
fn kill_at_step(mut c: Command) {
    let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("at-step"), "{line}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

#[test]
fn kill_at_every_write_step() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    for id in ["base1", "base2"] {
        assert!(stepper(dir, id, None).status().unwrap().success());
    }
    let mut committed = vec!["base1".to_string(), "base2".to_string()];
    for (i, step) in WRITE_STEPS.iter().enumerate() {
        let id = format!("crash{i}");
        kill_at_step(stepper(dir, &id, Some(i)));
        // the rename is the commit point
        let renamed = WRITE_STEPS
            .iter()
            .position(|s| *s == WriteStep::Renamed)
            .unwrap();
        if i >= renamed {
            committed.push(id.clone());
        }
        assert_eq!(ids(dir), committed, "after kill -9 at {step:?}");
        // and the ledger stays usable: the next writer is not blocked by the dead one's lock
        let next = format!("after{i}");
        assert!(
            stepper(dir, &next, None).status().unwrap().success(),
            "write after crash at {step:?}"
        );
        committed.push(next);
        assert_eq!(ids(dir), committed);
    }
}

/// A container's record is rewritten without fsync (the boot
/// ends it), but a crash of the writer still never leaves it torn: kill -9
/// at every step of the hook's confirmation leaves the record as it was
/// (before the rename) or confirmed (after), its temp file is removed by
/// the next writer, and ledger.json is not touched.
#[test]
fn kill_at_every_step_of_a_record_rewrite() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let stepper = |step: Option<usize>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ledger-stepper"));
        c.arg("--record").arg(dir).arg("rec");
        if let Some(s) = step {
            c.arg(s.to_string());
        }
        c
    };
    let read = || {
        let l = gpuquota_core::Ledger {
            dir: dir.into(),
            grace_secs: 3600,
        };
        l.read()
            .expect("the ledger reads after a crash")
            .reservations
    };
    let files = |sub: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(sub)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let record_steps = [
        WriteStep::TempCreated,
        WriteStep::HalfWritten,
        WriteStep::Written,
        WriteStep::Renamed,
    ];
    for step in record_steps {
        // a fresh, unconfirmed record each round
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir(dir).unwrap();
        let boot = {
            let mut c = stepper(None);
            assert!(c.status().unwrap().success());
            let b: Vec<_> = files(dir)
                .into_iter()
                .filter(|f| f.starts_with("boot-"))
                .collect();
            assert_eq!(b.len(), 1, "one boot directory");
            dir.join(&b[0])
        };
        // reset it to unconfirmed: release and admit again through the stepper's admission
        let json_before = std::fs::read(dir.join("ledger.json")).unwrap();
        let held = read();
        assert_eq!(held.len(), 1);
        let mut r = held[0].clone();
        r.pid = None;
        r.pid_start = None;
        r.state = gpuquota_core::ledger::ResState::Reserved;
        let name = files(&boot)[0].clone();
        std::fs::write(boot.join(&name), serde_json::to_vec(&r).unwrap()).unwrap();
        let i = WRITE_STEPS.iter().position(|s| *s == step).unwrap();
        kill_at_step(stepper(Some(i)));
        let after = read();
        assert_eq!(after.len(), 1, "after kill -9 at {step:?}");
        let confirmed = after[0].pid.is_some();
        assert_eq!(
            confirmed,
            step == WriteStep::Renamed,
            "after kill -9 at {step:?}"
        );
        assert_eq!(after[0].slices, r.slices);
        // the next writer is not blocked, removes the temp, confirms
        assert!(stepper(None).status().unwrap().success(), "after {step:?}");
        assert_eq!(
            files(&boot),
            vec![name.clone()],
            "no temp left after {step:?}"
        );
        assert!(read()[0].pid.is_some());
        assert_eq!(
            std::fs::read(dir.join("ledger.json")).unwrap(),
            json_before,
            "ledger.json untouched"
        );
    }
}
