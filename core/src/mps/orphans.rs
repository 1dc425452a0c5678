//! MPS servers left by a control daemon that died. Under a multi-user
//! daemon (`-M`) the server it started lives on while it serves a client,
//! and on the H200 a new `nvidia-cuda-mps-control -d -M` on the same pipe
//! directory exited with status 1 until then: 16.5 s from the kill to a
//! served client, against 6.4 s for a single-user daemon, whose server went
//! with it (docs/gpu-runs/2026-12-04-h200-mpsuser/). A server whose daemon
//! is gone takes no new client and its clients fail (measured: the remote
//! procedure call between them failed), so before starting a new daemon
//! gpu-quota ends the servers of that pipe directory.
//!
//! A server is one of this directory's when its executable is the server
//! program beside the control program (same file: device and inode) and
//! its environment, inherited from the daemon gpu-quota started, names
//! the directory as `CUDA_MPS_PIPE_DIRECTORY`. A container's process
//! cannot be that file, so none of them is ever matched.
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// NVIDIA's server program, beside `nvidia-cuda-mps-control`.
pub const SERVER_PROGRAM: &str = "nvidia-cuda-mps-server";

/// Most processes looked at: /proc is the host's, but the work stays bounded.
const MAX_PROCS: usize = 1 << 16;
/// Most environment bytes read per process.
const MAX_ENVIRON: u64 = 1 << 20;

/// The pids under `proc` of `server`'s processes (the same file) whose
/// environment has `CUDA_MPS_PIPE_DIRECTORY=<pipe>`.
pub fn servers_of(proc: &Path, server: &Path, pipe: &Path) -> Vec<i32> {
    let Ok(want) = std::fs::metadata(server) else {
        return vec![];
    };
    let mut entry = b"CUDA_MPS_PIPE_DIRECTORY=".to_vec();
    entry.extend_from_slice(pipe.as_os_str().as_encoded_bytes());
    let Ok(rd) = std::fs::read_dir(proc) else {
        return vec![];
    };
    rd.flatten()
        .take(MAX_PROCS)
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let exe = std::fs::metadata(e.path().join("exe")).ok()?;
            if (exe.dev(), exe.ino()) != (want.dev(), want.ino()) {
                return None;
            }
            use std::io::Read;
            let mut env = Vec::new();
            std::fs::File::open(e.path().join("environ"))
                .ok()?
                .take(MAX_ENVIRON)
                .read_to_end(&mut env)
                .ok()?;
            env.split(|&b| b == 0)
                .any(|v| v == entry.as_slice())
                .then_some(pid)
        })
        .collect()
}

/// End the servers of `pipe` (of the server program beside `control`),
/// waiting up to `within` for each to go.
pub fn end(control: &Path, pipe: &Path, within: std::time::Duration) {
    let server = control.with_file_name(SERVER_PROGRAM);
    for pid in servers_of(Path::new("/proc"), &server, pipe) {
        // SAFETY: kill(2) on a pid just matched
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let until = std::time::Instant::now() + within;
        while Path::new(&format!("/proc/{pid}")).exists() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_the_server_program_of_this_pipe_directory_is_matched() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let server = bin.join(SERVER_PROGRAM);
        std::fs::write(&server, b"server").unwrap();
        // another file of the same name (a container's copy)
        let copy = d.path().join(SERVER_PROGRAM);
        std::fs::write(&copy, b"server").unwrap();
        let proc = d.path().join("proc");
        let pipe = Path::new("/var/lib/gq/mps/GPU-0/pipe");
        let add = |pid: &str, exe: &Path, env: &[u8]| {
            let p = proc.join(pid);
            std::fs::create_dir_all(&p).unwrap();
            symlink(exe, p.join("exe")).unwrap();
            std::fs::write(p.join("environ"), env).unwrap();
        };
        let ours = b"PATH=/bin\0CUDA_MPS_PIPE_DIRECTORY=/var/lib/gq/mps/GPU-0/pipe\0";
        add("10", &server, ours);
        // another GPU's server
        add(
            "11",
            &server,
            b"CUDA_MPS_PIPE_DIRECTORY=/var/lib/gq/mps/GPU-1/pipe\0",
        );
        // a prefix of ours is not ours
        add(
            "12",
            &server,
            b"CUDA_MPS_PIPE_DIRECTORY=/var/lib/gq/mps/GPU-0/pipe/x\0",
        );
        // a process that names our directory but is not the server program
        add("13", &copy, ours);
        add("14", &bin, ours);
        // not a pid
        add("self", &server, ours);
        let mut found = servers_of(&proc, &server, pipe);
        found.sort();
        assert_eq!(found, [10]);
        assert!(servers_of(&proc, &d.path().join("missing"), pipe).is_empty());
    }
}
