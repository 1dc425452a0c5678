//! The boot's records: the container reservations admitted on the fast
//! path, one file each in `<ledger_dir>/boot-<boot_id>/`.
//!
//! A container's reservation means nothing after the boot it was made in
//! (a new boot makes it stale, `Ledger::is_stale`), so its record needs no
//! durability across a power loss: it is replaced atomically (temp file,
//! then the names exchanged, see `fsutil::replace_unsynced`) without fsync. A file torn by a power loss can only be in an
//! earlier boot's directory, whose records are all stale; it is removed
//! by the next transaction that reads every record (`gc`, a reclaim).
//!
//! The file name carries what admission needs from every other record —
//! which container (a hash of id and runc root), whether its bytes count,
//! and its bytes per GPU — so an admission lists one directory and reads
//! no other record: its work does not grow with the number of containers
//! beyond that listing (docs/benchmarks.md).
use super::{
    duplicates, Ledger, LedgerData, LedgerError, Loaded, Reservation, LEDGER_MODE, SCHEMA_VERSION,
};
use crate::formats::names::{fnv1a, FNV_OFFSET};
use crate::fsutil::{self, Durability, WriteStep};
use crate::placement::Usage;
use std::path::{Path, PathBuf};

/// Directory name prefix of a boot's records.
pub const BOOT_PREFIX: &str = "boot-";
/// File name prefix of a record.
const RECORD_PREFIX: &str = "r-";
/// Upper bound on one record file.
pub const MAX_RECORD_BYTES: u64 = 64 << 10;
/// A record whose name would be longer is kept in ledger.json instead.
pub(super) const MAX_NAME: usize = 240;

/// What a record's name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    pub file: String,
    /// [`key_hash`] of the container's id and runc root.
    pub key: u64,
    /// Whether its bytes count in sums (not bound to a claim).
    pub counts: bool,
    /// ([`uuid_tag`], bytes) per slice.
    pub slices: Vec<(u32, u64)>,
}

/// The parts' hash, each part ended by 0xff (a byte UTF-8 never has).
fn fnv(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .fold(FNV_OFFSET, |h, p| fnv1a(fnv1a(h, p), &[0xff]))
}

/// The hash a record's name carries for container `id` under runc root
/// `root` (`Key::Root`); two containers may share it, so a match is always
/// confirmed against the record's content.
pub fn key_hash(id: &str, root: Option<&str>) -> u64 {
    match root {
        Some(r) => fnv(&[b"root", id.as_bytes(), r.as_bytes()]),
        None => fnv(&[b"none", id.as_bytes()]),
    }
}

/// A GPU's tag in record names (32 bits of its uuid's hash).
pub fn uuid_tag(uuid: &str) -> u32 {
    fnv(&[uuid.as_bytes()]) as u32
}

/// The record name of `r`; `None` for what is not kept as a record (a
/// claim's entry, a reservation with a compute share or a burst limit, or
/// a name that would be too long). Shares and bursts stay in ledger.json,
/// which every admission reads in full: a name carries only bytes, and a
/// release that did not know shares would read a name that carried one as
/// no record at all and admit past it (a burst's limit, as a guarantee).
pub fn name_of(r: &Reservation) -> Option<String> {
    if r.is_claim()
        || r.slices
            .iter()
            .any(|s| s.sm_percent > 0 || s.burst.is_some())
    {
        return None;
    }
    let key = key_hash(&r.container_id, r.runtime_root.as_deref());
    let mut s = format!("{RECORD_PREFIX}{key:016x}-");
    if !r.counts() {
        s.push('b');
    } else {
        s.push('c');
        for sl in &r.slices {
            s.push_str(&format!(".{:08x}x{:x}", uuid_tag(&sl.uuid), sl.vram_bytes));
        }
    }
    (s.len() <= MAX_NAME).then_some(s)
}

/// The name of a record file; `None` for anything else in the directory.
pub fn parse_name(file: &str) -> Option<Name> {
    let rest = file.strip_prefix(RECORD_PREFIX)?;
    let (key, rest) = rest.split_once('-')?;
    if key.len() != 16 {
        return None;
    }
    let key = u64::from_str_radix(key, 16).ok()?;
    let mut parts = rest.split('.');
    let counts = match parts.next()? {
        "c" => true,
        "b" => false,
        _ => return None,
    };
    let mut slices = vec![];
    for p in parts {
        let (tag, bytes) = p.split_once('x')?;
        slices.push((
            u32::from_str_radix(tag, 16).ok()?,
            u64::from_str_radix(bytes, 16).ok()?,
        ));
    }
    if !counts && !slices.is_empty() {
        return None;
    }
    Some(Name {
        file: file.to_string(),
        key,
        counts,
        slices,
    })
}

/// Whether `b` is a boot id we name a directory after.
pub fn valid_boot(b: &str) -> bool {
    !b.is_empty() && b.len() <= 64 && b.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-')
}

/// Add the bytes and holders the names count to `u`, for the GPUs among
/// `uuids` (a record's bytes on a GPU not in the list place nothing).
/// A named record holds no compute share: a reservation with one is kept
/// in ledger.json ([`name_of`]).
pub fn add_usage<'a>(u: &mut Usage, names: &[Name], uuids: impl Iterator<Item = &'a str>) {
    let tags: Vec<(u32, &str)> = uuids.map(|x| (uuid_tag(x), x)).collect();
    for n in names.iter().filter(|n| n.counts) {
        for (tag, bytes) in &n.slices {
            for (_, uuid) in tags.iter().filter(|(t, _)| t == tag) {
                let e = u.entry(uuid.to_string()).or_default();
                e.bytes += bytes;
                e.holders += 1;
            }
        }
    }
}

/// The records on disk.
impl Ledger {
    /// This boot's record directory (`None` without a boot id: then every
    /// reservation is kept in ledger.json).
    pub(super) fn boot_dir(&self) -> Option<PathBuf> {
        let b = fsutil::boot_id()?;
        valid_boot(&b).then(|| self.dir.join(format!("{}{b}", BOOT_PREFIX)))
    }

    /// Every boot's record directory, this boot's marked `true`, from one
    /// listing of the ledger directory; `under_lock`: the temp files of
    /// ledger.json writes that crashed before their rename are removed on
    /// the way.
    pub(super) fn scan(&self, under_lock: bool) -> Result<Vec<(PathBuf, bool)>, LedgerError> {
        let current = self.boot_dir();
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(self.io(&self.dir)(e)),
        };
        let mut out = vec![];
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if under_lock && name.starts_with(".ledger.json.tmp.") {
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            let real_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false); // never a symlink
            if real_dir && name.starts_with(BOOT_PREFIX) {
                let p = e.path();
                let cur = current.as_deref() == Some(p.as_path());
                out.push((p, cur));
            }
        }
        Ok(out)
    }

    /// The record names in `dir` (none when it does not exist). Under the
    /// lock (`remove_temps`), temp files of crashed writers are removed.
    pub(super) fn list_records(
        &self,
        dir: &Path,
        remove_temps: bool,
    ) -> Result<Vec<Name>, LedgerError> {
        // a real directory (never listed through a symlink; only root can
        // make anything in the ledger directory, `secure_dir` checks that)
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(self.io(dir)(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a directory (a symlink?); gpu-quota keeps its records only in a real directory",
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(self.io(dir)(e)),
        }
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(self.io(dir)(e)),
        };
        let mut out = vec![];
        for e in rd {
            let e = e.map_err(self.io(dir))?;
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            if let Some(name) = parse_name(n) {
                out.push(name);
            } else if remove_temps && n.starts_with('.') {
                let _ = std::fs::remove_file(e.path());
            }
        }
        Ok(out)
    }

    /// One record; `None` when it is gone, or when it is an earlier boot's
    /// and does not parse (torn by the power loss that ended that boot:
    /// stale whatever it said; `remove` deletes it).
    pub(super) fn read_record(
        &self,
        path: &Path,
        current_boot: bool,
        remove: bool,
    ) -> Result<Option<Reservation>, LedgerError> {
        let bytes = match fsutil::read_regular_capped(path, MAX_RECORD_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || !current_boot => return Ok(None),
            Err(e) => return Err(self.io(path)(e)),
        };
        match serde_json::from_slice::<Reservation>(&bytes) {
            Ok(r) => Ok(Some(r)),
            Err(_) if !current_boot => {
                if remove {
                    let _ = std::fs::remove_file(path);
                }
                Ok(None)
            }
            Err(e) => Err(LedgerError::CorruptRecord {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        }
    }

    /// The records in `dirs` (from [`Ledger::scan`]), read whole
    /// (`under_lock`: temps and torn records of earlier boots are removed
    /// on the way).
    pub(super) fn load_records(
        &self,
        dirs: &[(PathBuf, bool)],
        under_lock: bool,
    ) -> Result<Vec<Loaded>, LedgerError> {
        let mut out = vec![];
        for (dir, current) in dirs {
            for n in self.list_records(dir, under_lock)? {
                let path = dir.join(&n.file);
                if let Some(res) = self.read_record(&path, *current, under_lock)? {
                    out.push(Loaded { path, res });
                }
            }
        }
        Ok(out)
    }

    /// Replace record `path` with `r`: temp file, names exchanged; no fsync (the
    /// module docs of [`records`] say why).
    pub(super) fn write_record(
        &self,
        path: &Path,
        r: &Reservation,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<(), LedgerError> {
        let mut bytes = serde_json::to_vec(r).expect("a reservation serializes");
        bytes.push(b'\n');
        fsutil::write_atomic_steps(path, &bytes, LEDGER_MODE, Durability::None, observe)
            .map_err(self.io(path))
    }

    /// Write what a whole-ledger transaction left: a reservation read from
    /// a record stays in it (rewritten if it changed), everything else goes
    /// to ledger.json, and records no longer held are removed — after
    /// ledger.json is written, so a crash in between leaves a reservation
    /// held twice (never one held nowhere; the next transaction merges the
    /// two, `duplicates`). `data` holds each container once (merged).
    pub(super) fn save(
        &self,
        data: LedgerData,
        recs: &[Loaded],
        dirs: &[(PathBuf, bool)],
        sync_dir: bool,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<(), LedgerError> {
        let mut held = vec![false; recs.len()];
        let mut json = vec![];
        for r in data.reservations {
            // the record that already says exactly this, else any of this
            // container's (a crash may have left it two)
            let Some(i) = (0..recs.len())
                .find(|&i| !held[i] && recs[i].res == r)
                .or_else(|| {
                    (0..recs.len()).find(|&i| !held[i] && duplicates::same(&recs[i].res, &r))
                })
            else {
                json.push(r);
                continue;
            };
            if r == recs[i].res {
                held[i] = true;
                continue;
            }
            // a changed record stays a record only in this boot's
            // directory: anything else changed goes to ledger.json, which
            // every admission counts (an earlier boot's directory is not)
            let dir = recs[i].path.parent().unwrap_or(&self.dir);
            let current = self.boot_dir().as_deref() == Some(dir);
            match name_of(&r).filter(|_| current) {
                Some(n) => {
                    let path = dir.join(n);
                    self.write_record(&path, &r, observe)?;
                    // the file written now holds it, whichever record
                    // was there under that name before
                    for (h, l) in held.iter_mut().zip(recs) {
                        *h |= l.path == path;
                    }
                }
                None => json.push(r),
            }
        }
        let data = LedgerData {
            version: SCHEMA_VERSION,
            reservations: json,
        };
        self.write_json(&data, sync_dir, observe)?;
        for (l, _) in recs.iter().zip(&held).filter(|(_, h)| !**h) {
            let _ = std::fs::remove_file(&l.path);
        }
        // an earlier boot's directory, once empty
        for (dir, _) in dirs.iter().filter(|(_, current)| !current) {
            let _ = std::fs::remove_dir(dir);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Slice;

    fn res(id: &str, root: Option<&str>, slices: &[(&str, u64)]) -> Reservation {
        Reservation::new(
            id,
            root,
            "/b",
            slices
                .iter()
                .enumerate()
                .map(|(i, (u, b))| Slice::memory(u.to_string(), i as u32, *b))
                .collect(),
            "vram=1g",
        )
    }

    #[test]
    fn a_name_says_what_admission_needs_and_nothing_else_parses() {
        let r = res("c1", Some("/run/runc"), &[("GPU-a", 1 << 30), ("GPU-b", 5)]);
        let n = parse_name(&name_of(&r).unwrap()).unwrap();
        assert_eq!(n.key, key_hash("c1", Some("/run/runc")));
        assert_ne!(n.key, key_hash("c1", None), "the root is part of the key");
        assert_ne!(key_hash("a", Some("b")), key_hash("ab", None));
        assert!(n.counts);
        assert_eq!(
            n.slices,
            vec![(uuid_tag("GPU-a"), 1 << 30), (uuid_tag("GPU-b"), 5)]
        );
        let mut bound = r.clone();
        bound.bound_claim = Some("uid".into());
        let b = parse_name(&name_of(&bound).unwrap()).unwrap();
        assert!(!b.counts && b.slices.is_empty());
        let mut claim = r.clone();
        claim.claim = Some(super::super::ClaimEntry {
            uid: "u".into(),
            namespace: "n".into(),
            name: "x".into(),
            token: "t".into(),
        });
        assert_eq!(
            name_of(&claim),
            None,
            "a claim's entry stays in ledger.json"
        );
        let many: Vec<(&str, u64)> = (0..16).map(|_| ("GPU-x", u64::MAX)).collect();
        assert_eq!(name_of(&res("c", None, &many)), None, "too long a name");
        for junk in [
            ".r-0000000000000000-c.tmp.1",
            "r-00-c",
            "r-000000000000000g-c",
            "r-0000000000000000-x",
            "r-0000000000000000-b.00000000x1",
            "r-0000000000000000-c.zz",
            "ledger.json",
        ] {
            assert_eq!(parse_name(junk), None, "{junk}");
        }
    }

    #[test]
    fn usage_from_names_is_usage_from_contents() {
        let rs = vec![
            res("a", None, &[("GPU-a", 3)]),
            res("b", None, &[("GPU-a", 4), ("GPU-b", 5)]),
            res("c", Some("/r"), &[("GPU-gone", 7)]),
            {
                let mut r = res("d", None, &[("GPU-a", 100)]);
                r.bound_claim = Some("u".into());
                r
            },
        ];
        let names: Vec<Name> = rs
            .iter()
            .map(|r| parse_name(&name_of(r).unwrap()).unwrap())
            .collect();
        let mut u = Usage::new();
        add_usage(&mut u, &names, ["GPU-a", "GPU-b"].into_iter());
        let mut want = super::super::LedgerData {
            version: 0,
            reservations: rs,
        }
        .usage();
        want.remove("GPU-gone");
        assert_eq!(u, want);
    }
}
