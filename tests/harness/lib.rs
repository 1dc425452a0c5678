//! End-to-end harness: a throw-away host (device nodes made with mknod, a
//! driver library directory, a static inventory, a private ledger and runc
//! root) and busybox bundles, driving the real `gpu-quota-runtime` and real
//! runc. The same bundles run under plain runc to prove the harness itself.
use serde_json::{json, Value};

pub mod cuda;
pub mod mps;
pub mod untrusted;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const GIB: u64 = 1 << 30;

/// Why an e2e test cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root".into());
    }
    for (bin, pkg) in [("runc", "runc"), ("busybox", "busybox-static")] {
        if which(bin).is_none() {
            return Some(format!("{bin} not installed (apt-get install {pkg})"));
        }
    }
    None
}

/// Skip (outside CI) or fail (when GPU_QUOTA_E2E=1, as `make test` sets).
#[macro_export]
macro_rules! require_e2e {
    () => {
        if let Some(why) = $crate::unavailable() {
            if std::env::var("GPU_QUOTA_E2E").as_deref() == Ok("1") {
                panic!("e2e test cannot run: {why}");
            }
            eprintln!("skipping e2e test: {why} (set GPU_QUOTA_E2E=1 to make this an error)");
            return;
        }
    };
}

pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Directory holding the built binaries (`GPU_QUOTA_BIN_DIR`, else the
/// workspace's target/debug).
/// The repository root.
/// Compile the test program `tests/e2e/<src>` to `out` (`cc -O2`, plus
/// `extra`: `-static` for a program run inside a container).
pub fn cc(src: &str, out: &Path, extra: &[&str]) {
    let o = Command::new("cc")
        .arg("-O2")
        .arg("-o")
        .arg(out)
        .arg(repo_dir().join("tests/e2e").join(src))
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc {src}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GPU_QUOTA_BIN_DIR") {
        return d.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or(root.join("target"));
    target.join("debug")
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} not built: run `cargo build --workspace` (make test does)",
        p.display()
    );
    p
}

/// A test host.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub runc_root: PathBuf,
}

pub struct HostOpts {
    pub gpus: u32,
    pub gpu_mem: &'static str,
    /// Config lines (`@HOST@` stands for the host's directory).
    pub extra_config: String,
    /// Driver library directory (default: fake files made here).
    pub lib_dir: Option<PathBuf>,
    pub interceptor: Option<PathBuf>,
}

impl Default for HostOpts {
    fn default() -> Self {
        Self {
            gpus: 2,
            gpu_mem: "16g",
            extra_config: String::new(),
            lib_dir: None,
            interceptor: None,
        }
    }
}

pub fn uuid(i: u32) -> String {
    format!("GPU-{i:08x}-0000-4000-8000-{i:012x}")
}

fn mknod(path: &Path, major: u32, minor: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C string; creating a character device node as root.
    let r = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

impl Host {
    pub fn new(opts: HostOpts) -> Host {
        let dir = tempfile::Builder::new()
            .prefix("gq-e2e-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        for sub in ["dev", "lib", "bin", "ledger", "state", "runc-root"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        for i in 0..opts.gpus {
            mknod(&d.join(format!("dev/nvidia{i}")), 195, i);
        }
        mknod(&d.join("dev/nvidiactl"), 195, 255);
        mknod(&d.join("dev/nvidia-uvm"), 237, 0);
        mknod(&d.join("dev/nvidia-uvm-tools"), 237, 1);
        let lib_dir = opts.lib_dir.clone().unwrap_or_else(|| {
            let l = d.join("lib");
            std::fs::write(l.join("libcuda.so.580.1"), b"fake libcuda").unwrap();
            std::os::unix::fs::symlink("libcuda.so.580.1", l.join("libcuda.so.1")).unwrap();
            std::fs::write(l.join("libnvidia-ml.so.580.1"), b"fake nvml").unwrap();
            std::os::unix::fs::symlink("libnvidia-ml.so.580.1", l.join("libnvidia-ml.so.1"))
                .unwrap();
            l
        });
        // a static ELF stand-in (the hook injects executables, never scripts)
        let smi = repo_dir().join("tests/fake/build/nvidia-smi");
        assert!(
            smi.is_file(),
            "{} not built: make -C tests/fake",
            smi.display()
        );
        std::fs::copy(&smi, d.join("bin/nvidia-smi")).unwrap();
        let interceptor = opts.interceptor.clone().unwrap_or_else(|| {
            let p = d.join("libgpuquota.so");
            std::fs::write(&p, b"placeholder interceptor").unwrap();
            p
        });
        let mut cfg = format!(
            "ledger_dir = \"{d}/ledger\"\nstate_dir = \"{d}/state\"\ncdi_dir = \"{d}/cdi\"\ninterceptor = \"{i}\"\nhook = \"{h}\"\ncreate_grace_secs = 5\nlog_file = \"{d}/gq.log\"\n{extra}\n[driver]\ndev_root = \"{d}/dev\"\nlib_dirs = [\"{l}\"]\nbin_dirs = [\"{d}/bin\"]\n",
            d = d.display(),
            i = interceptor.display(),
            h = bin("gpu-quota-hook").display(),
            l = lib_dir.display(),
            extra = opts.extra_config.replace("@HOST@", &d.display().to_string()),
        );
        for i in 0..opts.gpus {
            cfg.push_str(&format!(
                "[[inventory.gpu]]\nindex = {i}\nuuid = \"{}\"\nmemory = \"{}\"\n",
                uuid(i),
                opts.gpu_mem
            ));
        }
        std::fs::write(d.join("config.toml"), cfg).unwrap();
        let runc_root = d.join("runc-root");
        Host { dir, runc_root }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn config(&self) -> PathBuf {
        self.path().join("config.toml")
    }
    pub fn ledger_path(&self) -> PathBuf {
        self.path().join("ledger/ledger.json")
    }
    /// The container records of every boot (`ledger/boot-*/r-*`), by path.
    pub fn ledger_records(&self) -> Vec<PathBuf> {
        let mut out = vec![];
        let Ok(rd) = std::fs::read_dir(self.path().join("ledger")) else {
            return out;
        };
        for boot in rd
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("boot-"))
        {
            for r in std::fs::read_dir(boot.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if r.file_name().to_string_lossy().starts_with("r-") {
                    out.push(r.path());
                }
            }
        }
        out.sort();
        out
    }
    /// Reservations as JSON (empty when the ledger does not exist yet):
    /// ledger.json's, then the boot's container records.
    pub fn reservations(&self) -> Vec<Value> {
        let mut out = match std::fs::read(self.ledger_path()) {
            Ok(b) => serde_json::from_slice::<Value>(&b).expect("ledger parses")["reservations"]
                .as_array()
                .unwrap()
                .clone(),
            Err(_) => vec![],
        };
        for p in self.ledger_records() {
            if let Ok(b) = std::fs::read(&p) {
                out.push(serde_json::from_slice(&b).expect("a ledger record parses"));
            }
        }
        out
    }
    /// The ledger's bytes, ledger.json and every record (name and
    /// content): equal before and after when nothing was written.
    pub fn ledger_bytes(&self) -> Option<Vec<u8>> {
        let json = std::fs::read(self.ledger_path()).ok();
        let records = self.ledger_records();
        if json.is_none() && records.is_empty() {
            return None;
        }
        let mut b = json.unwrap_or_default();
        for p in records {
            b.extend_from_slice(p.to_string_lossy().as_bytes());
            b.extend(std::fs::read(&p).unwrap_or_default());
        }
        Some(b)
    }

    /// `gpu-quota-runtime --root <private> ARGS`.
    /// Output goes through files, not pipes: after `create` the container
    /// inherits the runtime's stdio and would hold a pipe open forever.
    pub fn runtime(&self, args: &[&str]) -> Output {
        capture(self.runtime_cmd(args))
    }
    pub fn runtime_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("gpu-quota-runtime"));
        c.env("GPU_QUOTA_CONFIG", self.config())
            .arg("--root")
            .arg(&self.runc_root)
            .args(args)
            .stdin(Stdio::null());
        c
    }
    /// Plain runc with the same root (proves the harness without gpu-quota).
    pub fn runc(&self, args: &[&str]) -> Output {
        let mut c = Command::new("runc");
        c.arg("--root")
            .arg(&self.runc_root)
            .args(args)
            .stdin(Stdio::null());
        capture(c)
    }

    pub fn bundle(&self, name: &str) -> Bundle {
        Bundle::new(&self.path().join("bundles").join(name))
    }

    /// `gq-claim ARGS` on this host: prepares/unprepares a DRA claim
    /// through `core::claims`, as the DRA driver does for the kubelet.
    pub fn claim(&self, args: &[&str]) -> Output {
        let mut c = Command::new(bin("gq-claim"));
        c.env("GPU_QUOTA_CONFIG", self.config())
            .args(args)
            .stdin(Stdio::null());
        capture(c)
    }
    /// Prepare claim `uid` (namespace `default`) of `bytes` on GPU `gpu`.
    pub fn prepare_claim(&self, uid: &str, name: &str, gpu: u32, bytes: u64) -> Output {
        self.claim(&[
            "prepare",
            uid,
            "default",
            name,
            &uuid(gpu),
            &bytes.to_string(),
        ])
    }
    /// The CDI spec directory of this host (`cdi_dir`).
    pub fn cdi_dir(&self) -> PathBuf {
        self.path().join("cdi")
    }
    /// The CDI spec of claim `uid`.
    pub fn cdi_spec_path(&self, uid: &str) -> PathBuf {
        self.cdi_dir()
            .join(format!("vram.gpu-quota.io-claim-{uid}.json"))
    }
    /// The environment entry claim `uid`'s CDI device injects (what a CDI
    /// engine adds to the container's process.env).
    pub fn cdi_env(&self, uid: &str) -> String {
        let v: Value =
            serde_json::from_slice(&std::fs::read(self.cdi_spec_path(uid)).unwrap()).unwrap();
        v["devices"][0]["containerEdits"]["env"][0]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Force-remove every container the test left behind.
    pub fn cleanup(&self) {
        let out = self.runc(&["list", "-q"]);
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = self.runtime(&["delete", "--force", id]);
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// A busybox bundle with an /out directory shared with the host.
pub struct Bundle {
    pub dir: PathBuf,
    pub out: PathBuf,
}

impl Bundle {
    pub fn new(dir: &Path) -> Bundle {
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        let bb = which("busybox").expect("busybox");
        std::fs::copy(&bb, rootfs.join("bin/busybox")).unwrap();
        for a in [
            "sh", "ls", "cat", "sleep", "test", "grep", "readlink", "mount", "touch", "echo", "wc",
            "mv", "env", "stat",
        ] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(a)).unwrap();
        }
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let b = Bundle {
            dir: dir.into(),
            out,
        };
        let cfg = json!({
            "ociVersion": "1.0.2-dev",
            "process": {
                "terminal": false, "user": {"uid": 0, "gid": 0},
                "args": ["sh", "-c", "true"],
                "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
                "cwd": "/",
                "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": false},
            "hostname": "gq",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
                {"destination": "/out", "type": "bind", "source": b.out.to_str().unwrap(), "options": ["rbind", "rw"]}
            ],
            "linux": {
                "resources": {"devices": [{"allow": false, "access": "rwm"}]},
                "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
                "maskedPaths": ["/proc/kcore"],
                "readonlyPaths": ["/proc/sys"]
            }
        });
        b.write_config(&cfg);
        b
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }
    pub fn config(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.config_path()).unwrap()).unwrap()
    }
    pub fn write_config(&self, v: &Value) {
        std::fs::write(self.config_path(), serde_json::to_vec_pretty(v).unwrap()).unwrap();
    }
    /// Set annotations, process args and extra env in one go.
    pub fn set(&self, annotations: &[(&str, &str)], script: &str, env: &[&str]) -> &Self {
        let mut c = self.config();
        let ann: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        if !ann.is_empty() {
            c["annotations"] = Value::Object(ann);
        }
        c["process"]["args"] = json!(["sh", "-c", script]);
        for e in env {
            c["process"]["env"].as_array_mut().unwrap().push(json!(e));
        }
        self.write_config(&c);
        self
    }
    pub fn bundle_arg(&self) -> String {
        self.dir.display().to_string()
    }
    /// Run the container's process as host uid and gid `uid` (no user
    /// namespace), with /out writable for it.
    pub fn run_as(&self, uid: u32) -> &Self {
        let mut c = self.config();
        c["process"]["user"] = json!({"uid": uid, "gid": uid});
        self.write_config(&c);
        std::os::unix::fs::chown(&self.out, Some(uid), Some(uid)).unwrap();
        self
    }
    /// Wait up to `secs` for /out/<name> to appear; returns its content.
    pub fn wait_out(&self, name: &str, secs: u64) -> Option<String> {
        let p = self.out.join(name);
        for _ in 0..secs * 20 {
            if let Ok(s) = std::fs::read_to_string(&p) {
                return Some(s);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }
}

/// Run `c` with stdout/stderr in temporary files; wait for the command only.
pub fn capture(mut c: Command) -> Output {
    let out = tempfile::tempfile().unwrap();
    let err = tempfile::tempfile().unwrap();
    let status = c
        .stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .status()
        .unwrap();
    let read = |mut f: std::fs::File| {
        use std::io::{Read, Seek};
        let mut v = Vec::new();
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut v).unwrap();
        v
    };
    Output {
        status,
        stdout: read(out),
        stderr: read(err),
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
}

/// `gpu-quota metrics --listen 127.0.0.1:0` for host `h`, killed when
/// dropped; `addr` is the address it printed.
pub struct Exporter {
    pub child: std::process::Child,
    pub addr: String,
}

impl Exporter {
    pub fn start(h: &Host) -> Exporter {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(bin("gpu-quota"))
            .env("GPU_QUOTA_CONFIG", h.config())
            .args(["metrics", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        Exporter { child, addr }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The grant a container saw (its script copied `/run/gpu-quota/grant` to
/// `/out/grant`): the bytes granted per GPU, in the grant's order.
pub fn out_grant(out: &Path) -> Vec<u64> {
    let b = std::fs::read(out.join("grant")).expect("the container copied its grant");
    gpuquota_core::formats::grant::decode(&b)
        .expect("a valid grant file")
        .gpus()
        .iter()
        .map(|g| g.vram_bytes)
        .collect()
}
