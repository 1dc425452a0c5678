//! What a container holds on one GPU, for a shrink (`update`): what the
//! host sees, not what the container says alone.
//!
//! Two accounts are read. The container's usage file (written by the
//! interceptor in the container, so by the container: root there can zero
//! it) and the driver's (NVML's per-process memory, read by the host in
//! gpu-quota-driver's `gpu-processes` child, `crate::procmem`), summed over
//! the container's processes: every host process NVML lists whose pid
//! namespace is the one of the container's init or one nested in it (a
//! process cannot leave its pid namespace, nor name itself into another).
//! What it holds is the larger of the two.
//!
//! Where the driver cannot tell (no NVML, NVML that lists no processes,
//! memory NVML does not attribute to a process of the container, a
//! container that shares the host's pid namespace), the only account left is
//! the container's own word, and a shrink on it would hand memory the
//! container may still hold to another container. The shrink is refused
//! then: the slice the container was granted is the floor. A high-water
//! mark sampled by the host would be no floor either: it would be sampled
//! from the same usage file, which the container can zero before the first
//! sample.
use crate::ledger::Reservation;
use crate::procmem::{GpuProcess, ProcessesReply};
use crate::units::human;
use crate::{state, usage, Config};
use std::collections::HashSet;
use std::fmt;
use std::path::Path;

/// Why a shrink to some size is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It holds more than the new size: by its usage file or by the driver.
    Holds { held: u64, detail: String },
    /// The host cannot see what its processes hold, and its usage file is
    /// the container's own word.
    Unknown { why: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Holds { held, detail } => write!(
                f,
                "it holds {} there ({detail}); free that memory in the container, then resize again",
                human(*held)
            ),
            Refusal::Unknown { why } => write!(
                f,
                "the host cannot see what its processes hold there ({why}), and its usage file is written by the container, so a container that zeroes it would be shrunk below what it holds and the memory given to another container; the slice stays: to make it smaller, recreate the container with the smaller slice, or resize on a host whose NVML reports per-process GPU memory"
            ),
        }
    }
}

/// What the driver attributes to the container's processes on the GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DriverView {
    pub bytes: u64,
    /// (host pid, its pid in its own namespace where known, bytes), the
    /// largest first.
    pub holders: Vec<(u32, Option<u64>, u64)>,
}

/// The two accounts of what a container holds on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// By its usage file: bytes, and which processes (as it names them).
    pub file: (u64, String),
    /// By the driver, or why the driver cannot tell.
    pub driver: Result<DriverView, String>,
}

impl Held {
    /// Why a shrink to `to` bytes is refused; `None`: it fits.
    pub fn refusal(&self, to: u64) -> Option<Refusal> {
        let (file, file_holders) = &self.file;
        match &self.driver {
            Ok(d) => {
                let held = (*file).max(d.bytes);
                (held > to).then(|| Refusal::Holds {
                    held,
                    detail: format!(
                        "by the driver: {}; by its usage file: {file_holders}",
                        driver_holders(d)
                    ),
                })
            }
            // what it says it holds is enough to refuse
            Err(_) if *file > to => Some(Refusal::Holds {
                held: *file,
                detail: format!("by its usage file: {file_holders}"),
            }),
            Err(why) => Some(Refusal::Unknown { why: why.clone() }),
        }
    }
}

fn driver_holders(d: &DriverView) -> String {
    if d.holders.is_empty() {
        return "no process of it holds memory there".into();
    }
    let list: Vec<String> = d
        .holders
        .iter()
        .take(8)
        .map(|(host, inner, b)| match inner {
            Some(i) => format!("host pid {host} (pid {i} in the container) {}", human(*b)),
            None => format!("host pid {host} {}", human(*b)),
        })
        .collect();
    let more = d.holders.len().saturating_sub(8);
    if more > 0 {
        format!("{} and {more} more", list.join(", "))
    } else {
        list.join(", ")
    }
}

/// What the container of reservation `r` (state directory `dir`) holds on
/// GPU `uuid`, by its usage file and by the driver.
pub fn held_on(cfg: &Config, dir: &Path, r: &Reservation, uuid: &str) -> Held {
    Held {
        file: by_usage_file(dir, r, uuid),
        driver: by_driver(cfg, r, uuid),
    }
}

/// The driver's account: NVML's processes on the GPU that are the
/// container's.
fn by_driver(cfg: &Config, r: &Reservation, uuid: &str) -> Result<DriverView, String> {
    let ns = container_pidns(r)?;
    let list = match crate::procmem::read(cfg, uuid) {
        Ok(ProcessesReply::Listed(l)) => l,
        Ok(ProcessesReply::Unsupported(why)) => return Err(format!("NVML: {why}")),
        Err(e) => return Err(format!("NVML's per-process memory: {e}")),
    };
    attribute(&list, &|pid| in_pidns_tree(pid, ns))
}

/// Where a shrink learns what a container holds on a GPU: the host's two
/// accounts ([`OnHost`]); core's tests give their own.
pub trait Measure {
    fn held_on(&self, cfg: &Config, dir: &Path, r: &Reservation, uuid: &str) -> Held;
}

/// The host's accounts: the usage file and NVML's per-process memory.
pub struct OnHost;

impl Measure for OnHost {
    fn held_on(&self, cfg: &Config, dir: &Path, r: &Reservation, uuid: &str) -> Held {
        held_on(cfg, dir, r, uuid)
    }
}

/// The container's processes' share of `list`: each listed pid that
/// `member` says is the container's. Memory NVML does not attribute to a
/// process of the container leaves the driver unable to tell.
pub fn attribute(list: &[GpuProcess], member: &dyn Fn(u32) -> bool) -> Result<DriverView, String> {
    let mut v = DriverView::default();
    for p in list.iter().filter(|p| member(p.pid)) {
        let Some(b) = p.used_bytes else {
            return Err(format!(
                "NVML lists its host pid {} on the GPU without the memory it uses",
                p.pid
            ));
        };
        v.bytes = v.bytes.saturating_add(b);
        if b > 0 {
            v.holders.push((p.pid, ns_pid(p.pid), b));
        }
    }
    v.holders.sort_by_key(|h| std::cmp::Reverse(h.2));
    Ok(v)
}

/// A pid namespace, by its nsfs (device, inode).
type NsId = (u64, u64);

fn ns_of_file(f: &std::fs::File) -> Option<NsId> {
    use std::os::unix::fs::MetadataExt;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// The pid namespace of the container's init, when it is alive and has
/// one of its own.
fn container_pidns(r: &Reservation) -> Result<NsId, String> {
    let (Some(pid), Some(start)) = (r.pid, r.pid_start) else {
        return Err("its init process is not recorded".into());
    };
    if !crate::fsutil::process_alive(pid, start) {
        return Err(format!("its init process (host pid {pid}) is not running"));
    }
    let open = |p: &str| std::fs::File::open(format!("/proc/{p}/ns/pid")).ok();
    let ns = open(&pid.to_string())
        .as_ref()
        .and_then(ns_of_file)
        .ok_or_else(|| format!("the pid namespace of its init (host pid {pid}) cannot be read"))?;
    if open("self").as_ref().and_then(ns_of_file) == Some(ns) {
        return Err(
            "it shares this host's pid namespace, so its processes cannot be told from others"
                .into(),
        );
    }
    Ok(ns)
}

/// The deepest a pid namespace can be nested (the kernel's MAX_PID_NS_LEVEL).
const MAX_NS_DEPTH: usize = 32;

/// Whether host process `pid` runs in pid namespace `ns` or one nested in
/// it (by NS_GET_PARENT from the process's own namespace up; Linux 4.9+).
fn in_pidns_tree(pid: u32, ns: NsId) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd};
    let Ok(mut f) = std::fs::File::open(format!("/proc/{pid}/ns/pid")) else {
        return false; // gone: it holds nothing any more
    };
    for _ in 0..=MAX_NS_DEPTH {
        if ns_of_file(&f) == Some(ns) {
            return true;
        }
        // SAFETY: an ioctl on a descriptor this function owns; a
        // non-negative result is a new descriptor it then owns.
        let parent = unsafe { libc::ioctl(f.as_raw_fd(), libc::NS_GET_PARENT) };
        if parent < 0 {
            return false; // the top of what this process can see
        }
        // SAFETY: `parent` is a fresh descriptor owned by nobody else.
        f = unsafe { std::fs::File::from_raw_fd(parent) };
    }
    false
}

/// The usage file's account: what the container says it holds on GPU
/// `uuid`, and by which processes (pids in the container). A file that
/// names no device for the GPU counts everything it holds.
fn by_usage_file(dir: &Path, r: &Reservation, uuid: &str) -> (u64, String) {
    let path = state::usage_path(dir);
    let alive = container_processes(r);
    let u = match &alive {
        // a slot counts while its process lives (same pid in the
        // container's pid namespace, same start time); one left by a dead
        // process is not held memory
        Some(set) => usage::read_alive(&path, &|h| set.contains(&(h.pid, h.start_time))),
        // processes not known (no live init): every slot counts
        None => usage::read(&path),
    };
    let Some(u) = u else {
        return (0, "no CUDA process".into());
    };
    let dev = gpuquota_formats::limits::parse_uuid(uuid.as_bytes()).and_then(|x| u.device_of(&x));
    let of = |used: &[u64]| match dev {
        Some(d) => used.get(d).copied().unwrap_or(0),
        None => used.iter().fold(0u64, |a, b| a.saturating_add(*b)),
    };
    let mut who: Vec<(u64, u64)> = u
        .holders
        .iter()
        .map(|h| (h.pid, of(&h.used)))
        .filter(|(_, b)| *b > 0)
        .collect();
    who.sort_by_key(|b| std::cmp::Reverse(b.1));
    let list = who
        .iter()
        .take(8)
        .map(|(pid, b)| format!("pid {pid} {}", human(*b)))
        .collect::<Vec<_>>()
        .join(", ");
    let more = who.len().saturating_sub(8);
    let holders = match (who.len(), more) {
        (0, _) => "no process holds memory there".into(),
        (_, 0) => format!("{list}, pids as the container sees them"),
        _ => format!("{list} and {more} more, pids as the container sees them"),
    };
    (of(&u.used), holders)
}

/// Upper bound on the processes looked at.
const MAX_PROCS: usize = 1 << 20;

/// The container's processes as its usage file names them: (pid in the
/// container's pid namespace, start time), for every host process in the
/// pid namespace of the container's init (by `/proc/PID/ns/pid`, on cgroup
/// v1 and v2 alike). A process of a pid namespace nested inside the
/// container names itself by its innermost pid and is not matched: its slot
/// counts as gone. None when the container's init is not known alive.
fn container_processes(r: &Reservation) -> Option<HashSet<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let pid = r.pid?;
    if !r
        .pid_start
        .is_some_and(|s| crate::fsutil::process_alive(pid, s))
    {
        return None;
    }
    let ns_of = |p: &str| {
        std::fs::metadata(format!("/proc/{p}/ns/pid"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    let ns = ns_of(&pid.to_string())?;
    let mut out = HashSet::new();
    for (n, e) in std::fs::read_dir("/proc").ok()?.flatten().enumerate() {
        if n > MAX_PROCS {
            return None;
        }
        let name = e.file_name();
        let Some(hp) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if ns_of(&hp.to_string()) != Some(ns) {
            continue;
        }
        if let (Some(inner), Some(st)) = (ns_pid(hp), crate::fsutil::process_start_time(hp)) {
            out.insert((inner, st));
        }
    }
    Some(out)
}

/// A host process's pid in its innermost pid namespace (`NSpid`'s last).
fn ns_pid(host_pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn p(pid: u32, used_bytes: Option<u64>) -> GpuProcess {
        GpuProcess { pid, used_bytes }
    }

    fn held(file: u64, driver: Result<u64, &str>) -> Held {
        Held {
            file: (file, "pid 7 …".into()),
            driver: driver
                .map(|bytes| DriverView {
                    bytes,
                    holders: vec![(4242, Some(7), bytes)],
                })
                .map_err(String::from),
        }
    }

    #[test]
    fn what_it_holds_is_the_larger_account() {
        // a zeroed usage file: the driver's account refuses
        let r = held(0, Ok(7 * G)).refusal(2 * G).unwrap();
        assert!(matches!(r, Refusal::Holds { held, .. } if held == 7 * G));
        let m = r.to_string();
        assert!(
            m.contains("holds 7.00 GiB")
                && m.contains("by the driver: host pid 4242 (pid 7 in the container) 7.00 GiB")
                && m.contains("free that memory"),
            "{m}"
        );
        // the container says more than the driver sees: its word refuses
        assert!(matches!(
            held(5 * G, Ok(G)).refusal(2 * G),
            Some(Refusal::Holds { held, .. }) if held == 5 * G
        ));
        // both fit
        assert_eq!(held(G, Ok(G)).refusal(2 * G), None);
    }

    #[test]
    fn where_the_driver_cannot_tell_the_grant_is_the_floor() {
        let r = held(0, Err("NVML: not supported")).refusal(2 * G).unwrap();
        let m = r.to_string();
        assert!(
            matches!(r, Refusal::Unknown { .. })
                && m.contains(
                    "the host cannot see what its processes hold there (NVML: not supported)"
                )
                && m.contains("recreate the container with the smaller slice"),
            "{m}"
        );
        // what the container says it holds is still reason enough, and the
        // more useful one
        assert!(matches!(
            held(3 * G, Err("x")).refusal(2 * G),
            Some(Refusal::Holds { held, .. }) if held == 3 * G
        ));
    }

    #[test]
    fn only_the_containers_processes_count_and_each_must_be_attributed() {
        let mine = |pid: u32| pid == 10 || pid == 11;
        let list = [
            p(10, Some(3 * G)),
            p(11, Some(G)),
            p(12, Some(9 * G)),
            p(13, None),
        ];
        let v = attribute(&list, &mine).unwrap();
        assert_eq!(v.bytes, 4 * G);
        assert_eq!(
            v.holders.iter().map(|h| (h.0, h.2)).collect::<Vec<_>>(),
            vec![(10, 3 * G), (11, G)]
        );
        // another container's unattributed process changes nothing; one of
        // this container's leaves the driver unable to tell
        let list = [p(10, Some(G)), p(11, None)];
        let e = attribute(&list, &mine).unwrap_err();
        assert!(
            e.contains("host pid 11") && e.contains("without the memory"),
            "{e}"
        );
        assert_eq!(attribute(&[], &mine).unwrap(), DriverView::default());
    }

    fn own_ns() -> NsId {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata("/proc/self/ns/pid").unwrap();
        (m.dev(), m.ino())
    }

    #[test]
    fn a_process_of_a_nested_pid_namespace_is_the_containers() {
        let me = std::process::id();
        assert!(in_pidns_tree(me, own_ns()));
        assert!(!in_pidns_tree(me, (0, 0)));
        assert!(!in_pidns_tree(u32::MAX, own_ns()), "no such process");
        // a process in a pid namespace of its own, below this one (needs
        // root and unshare; skipped where either is missing)
        let Ok(mut c) = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sleep", "20"])
            .spawn()
        else {
            return;
        };
        let mut child = None;
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", c.id()))
                .unwrap_or_default();
            if let Some(k) = kids.split_whitespace().next() {
                child = k.parse::<u32>().ok();
                break;
            }
        }
        let nested = child.and_then(|child| {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(format!("/proc/{child}/ns/pid")).ok()?;
            Some((child, (m.dev(), m.ino())))
        });
        // unshare could not make a pid namespace here: nothing to check
        let checked = nested.map(|(child, nested)| {
            (
                nested != own_ns(),
                in_pidns_tree(child, own_ns()),
                in_pidns_tree(child, nested),
                in_pidns_tree(me, nested),
                ns_pid(child),
            )
        });
        let _ = c.kill();
        let _ = c.wait();
        if let Some(c) = checked {
            // its own namespace, nested in ours (and ours not in it); pid 1 there
            assert_eq!(c, (true, true, true, false, Some(1)));
        }
    }
}
