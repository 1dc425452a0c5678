//! Issue 2 acceptance 6: a crash (kill -9) at every step of a ledger write
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
        let mut child = stepper(dir, &id, Some(i))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("at-step"), "{line}");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
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
