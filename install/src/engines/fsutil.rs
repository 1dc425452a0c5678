//! Shared file plumbing for the engine installer.
//!
//! * [`FsView`]: the read-only view planners get, so planning is pure (unit tests use
//!   [`MemFs`]); paths are always paths *on the target system* (`/etc/docker/daemon.json`).
//! * [`RootFs`]: the real view, relative to `--root` (default `/`).
//! * [`remove_file`]: remove, fsync the directory. Writes go through core's one atomic
//!   writer (`gpuquota_core::fsutil::write_atomic_as` with `FileMode::KeepOr`: the mode and
//!   owner of the file being replaced are kept).
//! * [`unified_diff`]: the `--dry-run` output.
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::model::EngineError;

/// Suffix of the backup taken before the first change of a pre-existing file.
pub const BACKUP_SUFFIX: &str = ".gpu-quota.bak";

/// `<file>.gpu-quota.bak`
pub fn backup_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

/// What a planner may look at. Every path is absolute on the target system.
pub trait FsView {
    /// The file's bytes, `None` when it does not exist.
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, EngineError>;
    /// Whether anything (file, directory, link) exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Names in a directory, sorted; empty when it does not exist.
    fn list_dir(&self, path: &Path) -> Vec<String>;
}

/// Lexically normalise an absolute path (`/a/./b/../c` → `/a/c`); never climbs above `/`.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// The real file system, seen from `root` (`/` on a live system, a staging tree with `--root`).
pub struct RootFs {
    root: PathBuf,
}

impl RootFs {
    pub fn new(root: PathBuf) -> Self {
        RootFs { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a target-system path lives on this machine.
    pub fn host_path(&self, target: &Path) -> PathBuf {
        let rel = normalize(target);
        let rel = rel.strip_prefix("/").unwrap_or(&rel);
        if rel.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Follow symbolic links of the last path component *inside the root* (an absolute link
    /// target means a path in the tree, not on the machine running the installer), so that
    /// replacing a linked config file rewrites the file the link points to.
    pub fn resolve(&self, target: &Path) -> PathBuf {
        let mut t = normalize(target);
        for _ in 0..16 {
            let host = self.host_path(&t);
            match fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => match fs::read_link(&host) {
                    Ok(link) => {
                        t = if link.is_absolute() {
                            normalize(&link)
                        } else {
                            normalize(&t.parent().unwrap_or(Path::new("/")).join(link))
                        }
                    }
                    Err(_) => break,
                },
                _ => break,
            }
        }
        t
    }

    fn io_err(&self, target: &Path, e: io::Error) -> EngineError {
        // Errors carry target paths; the command maps them to host paths once.
        EngineError::io(target, e)
    }
}

impl FsView for RootFs {
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, EngineError> {
        let host = self.host_path(&self.resolve(path));
        match fs::read(&host) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Err(EngineError::invalid(
                path,
                "is a directory, expected a file",
                "move it out of the way and run the command again",
            )),
            Err(e) => Err(self.io_err(path, e)),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        fs::symlink_metadata(self.host_path(path)).is_ok()
    }

    fn list_dir(&self, path: &Path) -> Vec<String> {
        let mut v: Vec<String> = match fs::read_dir(self.host_path(&self.resolve(path))) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect(),
            Err(_) => Vec::new(),
        };
        v.sort();
        v
    }
}

/// An in-memory tree for planner unit tests.
#[derive(Default, Clone)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct MemFs {
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    pub dirs: BTreeSet<PathBuf>,
}

#[cfg_attr(not(test), allow(dead_code))]
impl MemFs {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with(mut self, path: &str, content: &str) -> Self {
        self.put(path, content.as_bytes().to_vec());
        self
    }
    pub fn put(&mut self, path: &str, content: Vec<u8>) {
        let p = PathBuf::from(path);
        let mut d = p.parent();
        while let Some(x) = d {
            self.dirs.insert(x.to_path_buf());
            d = x.parent();
        }
        self.files.insert(p, content);
    }
    /// Apply planned changes (what the applier does, minus the disk).
    pub fn apply(&mut self, changes: &[super::model::FileChange]) {
        for c in changes {
            match &c.after {
                Some(b) => self.put(c.path.to_str().unwrap(), b.clone()),
                None => {
                    self.files.remove(&c.path);
                }
            }
        }
    }
    pub fn get(&self, path: &str) -> Option<String> {
        self.files
            .get(Path::new(path))
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

impl FsView for MemFs {
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.files.get(path).cloned())
    }
    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path) || self.dirs.contains(path) || path == Path::new("/")
    }
    fn list_dir(&self, path: &Path) -> Vec<String> {
        let mut v: Vec<String> = self
            .files
            .keys()
            .chain(self.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(String::from))
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Remove a file and fsync its directory; a file already gone is fine.
pub fn remove_file(host: &Path) -> io::Result<()> {
    match fs::remove_file(host) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    if let Some(d) = host.parent().and_then(|d| fs::File::open(d).ok()) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A unified diff of two texts (3 lines of context), headed `--- old_label` / `+++ new_label`.
/// Empty when the texts are equal.
pub fn unified_diff(old: &[u8], new: &[u8], old_label: &str, new_label: &str) -> String {
    if old == new {
        return String::new();
    }
    let old_s = String::from_utf8_lossy(old);
    let new_s = String::from_utf8_lossy(new);
    let a: Vec<&str> = split_lines(&old_s);
    let b: Vec<&str> = split_lines(&new_s);
    let ops = diff_ops(&a, &b);

    let mut out = format!("--- {old_label}\n+++ {new_label}\n");
    const CTX: usize = 3;
    // Group the edit script into hunks.
    let n = ops.len();
    let mut i = 0;
    while i < n {
        if matches!(ops[i], Op::Eq(..)) {
            i += 1;
            continue;
        }
        // A hunk starts CTX equal lines before the first change and ends when more than
        // 2*CTX equal lines follow a change.
        let start = i.saturating_sub(CTX);
        let mut end = i;
        let mut j = i;
        while j < n {
            if !matches!(ops[j], Op::Eq(..)) {
                end = j;
                j += 1;
                continue;
            }
            let mut k = j;
            while k < n && matches!(ops[k], Op::Eq(..)) {
                k += 1;
            }
            if k == n || k - j > 2 * CTX {
                break;
            }
            j = k;
        }
        let stop = (end + 1 + CTX).min(n);
        let (mut a0, mut b0) = (usize::MAX, usize::MAX);
        let (mut al, mut bl) = (0, 0);
        let mut body = String::new();
        for op in &ops[start..stop] {
            match *op {
                Op::Eq(x, y) => {
                    a0 = a0.min(x);
                    b0 = b0.min(y);
                    al += 1;
                    bl += 1;
                    push_line(&mut body, ' ', a[x]);
                }
                Op::Del(x, y) => {
                    a0 = a0.min(x);
                    b0 = b0.min(y);
                    al += 1;
                    push_line(&mut body, '-', a[x]);
                }
                Op::Ins(x, y) => {
                    a0 = a0.min(x);
                    b0 = b0.min(y);
                    bl += 1;
                    push_line(&mut body, '+', b[y]);
                }
            }
        }
        let fmt_range = |s: usize, l: usize| {
            let s = if l == 0 { s } else { s + 1 };
            if l == 1 {
                format!("{s}")
            } else {
                format!("{s},{l}")
            }
        };
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            fmt_range(a0, al),
            fmt_range(b0, bl)
        ));
        out.push_str(&body);
        i = stop;
    }
    out
}

fn split_lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

fn push_line(out: &mut String, tag: char, line: &str) {
    out.push(tag);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// One step of the edit script; indices are (position in old, position in new).
#[derive(Clone, Copy, Debug)]
enum Op {
    Eq(usize, usize),
    Del(usize, usize),
    Ins(usize, usize),
}

/// Edit script by longest common subsequence over the part between the common prefix and
/// suffix (config edits are local, so that part is small).
fn diff_ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let mut pre = 0;
    while pre < a.len() && pre < b.len() && a[pre] == b[pre] {
        pre += 1;
    }
    let mut suf = 0;
    while suf < a.len() - pre && suf < b.len() - pre && a[a.len() - 1 - suf] == b[b.len() - 1 - suf]
    {
        suf += 1;
    }
    let am = &a[pre..a.len() - suf];
    let bm = &b[pre..b.len() - suf];
    let (n, m) = (am.len(), bm.len());
    let mut ops: Vec<Op> = (0..pre).map(|k| Op::Eq(k, k)).collect();
    if n * m <= 4_000_000 {
        // lcs[i][j] = LCS length of am[i..], bm[j..]
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        let idx = |i: usize, j: usize| i * (m + 1) + j;
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[idx(i, j)] = if am[i] == bm[j] {
                    lcs[idx(i + 1, j + 1)] + 1
                } else {
                    lcs[idx(i + 1, j)].max(lcs[idx(i, j + 1)])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Eq(pre + i, pre + j));
                i += 1;
                j += 1;
            } else if j < m && (i == n || lcs[idx(i, j + 1)] > lcs[idx(i + 1, j)]) {
                ops.push(Op::Ins(pre + i, pre + j));
                j += 1;
            } else {
                ops.push(Op::Del(pre + i, pre + j));
                i += 1;
            }
        }
    } else {
        // Too large to align: everything in the middle is replaced.
        ops.extend((0..n).map(|i| Op::Del(pre + i, pre)));
        ops.extend((0..m).map(|j| Op::Ins(pre + n, pre + j)));
    }
    ops.extend((0..suf).map(|k| Op::Eq(a.len() - suf + k, b.len() - suf + k)));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_small_change() {
        let a = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let b = "a\nb\nc\nd\nX\nf\ng\nh\n";
        let d = unified_diff(a.as_bytes(), b.as_bytes(), "old", "new");
        assert_eq!(
            d,
            "--- old\n+++ new\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+X\n f\n g\n h\n"
        );
    }

    #[test]
    fn diff_new_file_and_no_newline() {
        let d = unified_diff(b"", b"x\ny", "/dev/null", "new");
        assert_eq!(
            d,
            "--- /dev/null\n+++ new\n@@ -0,0 +1,2 @@\n+x\n+y\n\\ No newline at end of file\n"
        );
        let d = unified_diff(b"x\n", b"", "old", "/dev/null");
        assert_eq!(d, "--- old\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n");
    }

    #[test]
    fn diff_two_hunks() {
        let a: String = (0..20).map(|i| format!("{i}\n")).collect();
        let b = a.replace("2\n", "two\n").replace("17\n", "seventeen\n");
        let d = unified_diff(a.as_bytes(), b.as_bytes(), "o", "n");
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert!(d.contains("-2\n+two\n"));
        assert!(d.contains("-17\n+seventeen\n"));
    }

    #[test]
    fn normalize_and_backup() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(
            backup_path(Path::new("/etc/x.json")),
            PathBuf::from("/etc/x.json.gpu-quota.bak")
        );
    }
}
