//! The per-container state directory on the host
//! (`<state_dir>/containers/<id>-<hash of id, runc root and bundle>`),
//! bind-mounted read-only at `/run/gpu-quota` in the container. The
//! directory is a tmpfs of `STATE_FS_BYTES` mounted there just for this
//! container (made by the runtime before runc, see `create`), so a start
//! creates one inode on the filesystem under `state_dir` (the directory)
//! instead of nine, and a release deletes one instead of eleven, where
//! `state_dir` is not itself a tmpfs (docs/benchmarks.md).
//!
//! * `limits` — written by the hook: `key=value` lines, the format of
//!   gpuquota_formats::limits (its one writer and its one reader)
//! * `usage` — a mount point; the real usage file is `rw/usage` (mode
//!   0666), on a second tmpfs of `USAGE_FS_BYTES` mounted at `rw/` just for
//!   this container, and bind-mounted read-write over `usage` in the
//!   container. The container can write its counters but can never grow
//!   the file past that tmpfs (a usage file on the host's /run could
//!   otherwise fill the tmpfs that docker, containerd and runc need). It
//!   must be a filesystem of its own: a file handle
//!   (`name_to_handle_at`) of any other file on the filesystem of the
//!   container's one writable mount reopens that file writable through it
//!   (`open_by_handle_at`, with CAP_DAC_READ_SEARCH), so the usage file
//!   never shares one with `limits` and the rest. The interceptor owns its
//!   binary format.
//! * `driver/` — mount points for the driver libraries plus SONAME symlinks
//! * `libgpuquota.so` — mount point for the interceptor
//! * `ld.so.preload` — the merged preload list, bind-mounted on /etc/ld.so.preload
use crate::config::Config;
use crate::driver::DriverFiles;
use crate::ledger::Reservation;
use gpuquota_formats::{grant, limits, usage};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The state directory's subdirectory of driver-library mount points, its
/// mount point for the interceptor, its merged preload list.
pub use gpuquota_formats::layout::{DRIVER_SUBDIR, INTERCEPTOR_NAME, PRELOAD_NAME};
/// Size of the per-container tmpfs that is the state directory. Only the
/// host writes there, before the container runs: `limits`, the driver-limit
/// record, empty mount points, and `ld.so.preload` (the image's, at most
/// `mountplan::MAX_PRELOAD` bytes read, each invalid UTF-8 byte decoded to
/// three, plus one line): under 256 KiB.
pub const STATE_FS_BYTES: u64 = 1 << 20;
/// Inodes of that tmpfs: the files above, and a mount point and its
/// aliases per driver library.
pub const STATE_FS_INODES: u32 = 4096;
/// Size of the per-container tmpfs at `rw/` that holds the usage file, the
/// container's one writable file (the file itself is 260 KiB, see
/// interceptor/include/gpuquota_usage.h).
pub const USAGE_FS_BYTES: u64 = 512 << 10;
/// Inodes of the usage tmpfs: its root and the usage file (the container
/// can create none; a few to spare).
pub const USAGE_FS_INODES: u32 = 16;
/// Where the usage tmpfs is mounted inside the state directory.
pub const USAGE_FS_DIR: &str = "rw";

/// How the usage file is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageBacking {
    /// Its own size-limited tmpfs (the hook, as root).
    Tmpfs,
    /// A plain file in the state directory (unit tests without root).
    Plain,
}

/// The `limits` file for a reservation (gpuquota_formats::limits::write).
/// None when a value would not read back as itself (a line break in an id
/// or a UUID).
pub fn limits_text(r: &Reservation, context_overhead: u64) -> Option<String> {
    let mut s = String::new();
    limits::write(
        &mut s,
        &r.container_id,
        r.slices.iter().map(|s| s.uuid.as_str()),
        context_overhead,
    )
    .ok()?;
    if r.bound_claim.is_some() {
        limits::write_group(&mut s, consumer_group(r)).ok()?;
    }
    Some(s)
}

/// A container's tag in a usage file shared by the consumers of one DRA
/// claim (the slots' `group`): stable for the container (its id, runc
/// root and bundle, as its directory's name), never 0.
pub fn consumer_group(r: &Reservation) -> u64 {
    fnv(
        FNV_OFFSET,
        dir_name(&r.container_id, r.runtime_root.as_deref(), &r.bundle).as_bytes(),
    ) | 1
}

/// The directory of a DRA claim's shared usage file:
/// `<state_dir>/claims/<uid>` (a uid is a checked name, see
/// `claims::prepare`). Its `rw/` is a tmpfs of its own holding only the
/// usage file, for the reasons the container's own `rw/` is; every
/// container bound to the claim gets it bind-mounted on its own `rw/`, so
/// all of them count against the claim's one slice.
pub fn claim_dir(cfg: &Config, uid: &str) -> PathBuf {
    cfg.state_dir.join("claims").join(uid)
}

/// Make the claim's shared usage area unless it is there (the caller
/// holds the ledger's lock, so two consumers never both make it).
pub fn ensure_claim_usage(
    cfg: &Config,
    uid: &str,
    backing: UsageBacking,
) -> std::io::Result<PathBuf> {
    crate::fsutil::secure_dir(&cfg.state_dir, 0o755)?;
    let root = cfg.state_dir.join("claims");
    crate::fsutil::secure_dir(&root, 0o700)?;
    let dir = claim_dir(cfg, uid);
    if std::fs::symlink_metadata(usage_path(&dir)).is_ok_and(|m| m.is_file()) {
        return Ok(dir);
    }
    remove(&dir)?;
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    let made = (|| {
        let rw = dir.join(USAGE_FS_DIR);
        std::fs::create_dir(&rw)?;
        std::fs::set_permissions(&rw, std::fs::Permissions::from_mode(0o755))?;
        if backing == UsageBacking::Tmpfs {
            use nix::mount::{mount, MsFlags};
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            let opts = format!("size={USAGE_FS_BYTES},nr_inodes={USAGE_FS_INODES},mode=0755");
            mount(
                Some("gpu-quota-usage"),
                &rw,
                Some("tmpfs"),
                flags,
                Some(opts.as_str()),
            )?;
        }
        write(&usage_path(&dir), b"", 0o666)
    })();
    if let Err(e) = made {
        let _ = remove(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// The host state directory of a reservation:
/// `<state_dir>/containers/<id>-<hash>`, the hash over the id, the runc root
/// the container was created under and its bundle path. Containers that
/// share an id under different engines or runc roots (ctr namespaces,
/// docker and podman on one host) get different directories, also when they
/// share the bundle directory. The name is bounded: at most `DIR_ID_MAX`
/// bytes of the id (the hash covers all of it), then 17 more.
pub fn container_dir(cfg: &Config, r: &Reservation) -> PathBuf {
    cfg.state_dir.join("containers").join(dir_name(
        &r.container_id,
        r.runtime_root.as_deref(),
        &r.bundle,
    ))
}

/// Longest prefix of the id kept in a directory name (NAME_MAX is 255).
pub const DIR_ID_MAX: usize = 200;

use gpuquota_formats::names::{fnv1a as fnv, FNV_OFFSET};

/// `<id prefix>-<hash of (id, root, bundle)>`. Each part is length-prefixed,
/// so no part can be shifted into another; runc's default root (`None`) and
/// an empty root differ.
pub fn dir_name(id: &str, root: Option<&str>, bundle: &str) -> String {
    let mut h = fnv(FNV_OFFSET, b"gpu-quota state v2");
    for part in [Some(id), root, Some(bundle)] {
        match part {
            None => h = fnv(h, &[0]),
            Some(p) => {
                h = fnv(h, &[1]);
                h = fnv(h, &(p.len() as u64).to_le_bytes());
                h = fnv(h, p.as_bytes());
            }
        }
    }
    let short: String = id.chars().take(DIR_ID_MAX).collect();
    format!("{short}-{h:016x}")
}

/// The name older releases gave the state directory:
/// `<id>-<hash of the bundle path>` (no runc root). Containers created
/// before an upgrade keep it: `gc`'s sweep keeps it while their reservation
/// is held, readers fall back to it (`existing_dir`), and their release
/// removes it unless another held reservation has the same old name.
pub fn legacy_dir(cfg: &Config, r: &Reservation) -> PathBuf {
    let h = fnv(FNV_OFFSET, r.bundle.as_bytes());
    cfg.state_dir
        .join("containers")
        .join(format!("{}-{:016x}", r.container_id, h))
}

/// Where to read a reservation's state: its directory, or for a container
/// created before the upgrade, the old-named one if only that exists.
pub fn existing_dir(cfg: &Config, r: &Reservation) -> PathBuf {
    let dir = container_dir(cfg, r);
    if dir.symlink_metadata().is_err() {
        let old = legacy_dir(cfg, r);
        if old.symlink_metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return old;
        }
    }
    dir
}

/// Remove the state of a released reservation: its directory and, for a
/// container created before the upgrade, the old-named one — unless a
/// reservation still `held` has that old name too (the same id and bundle
/// under another root). `held: None` (the ledger could not be read): the
/// old name is left to `gc`'s sweep.
pub fn remove_released(
    cfg: &Config,
    r: &Reservation,
    held: Option<&[Reservation]>,
) -> std::io::Result<()> {
    remove(&container_dir(cfg, r))?;
    let old = legacy_dir(cfg, r);
    match held {
        Some(held) if !held.iter().any(|h| legacy_dir(cfg, h) == old) => remove(&old),
        _ => Ok(()),
    }
}

/// Container ids become directory names: allow what engines generate.
pub fn valid_container_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 1024
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// `<state_dir>/containers`: root-owned 0700, so no host user can reach a
/// container's files (the usage file inside is 0666 for the container's
/// users, who reach it through their bind mount only).
pub fn containers_root(state_dir: &Path) -> std::io::Result<PathBuf> {
    crate::fsutil::secure_dir(state_dir, 0o755)?;
    let c = state_dir.join("containers");
    crate::fsutil::secure_dir(&c, 0o700)?;
    // releases before 0.2 made it 0755: narrow it (it is ours, by name)
    std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o700))?;
    Ok(c)
}

/// The usage file on the host.
pub fn usage_path(dir: &Path) -> PathBuf {
    dir.join(USAGE_FS_DIR).join(usage::FILE_NAME)
}

/// Create the state directory of `r` afresh, as its own tmpfs, with the
/// empty usage file on a second tmpfs at `rw/` (a leftover from an earlier
/// container with the same id is removed first). gpu-quota-runtime does
/// this before it calls runc: mounts made on the host after runc cloned the
/// container's mount namespace are not visible from it, and the hook
/// bind-mounts from there.
pub fn create(cfg: &Config, r: &Reservation, backing: UsageBacking) -> std::io::Result<PathBuf> {
    containers_root(&cfg.state_dir)?;
    let dir = container_dir(cfg, r);
    remove(&dir)?;
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    let made = (|| {
        let tmpfs = |source: &str, at: &Path, opts: String| -> std::io::Result<()> {
            if backing != UsageBacking::Tmpfs {
                return Ok(());
            }
            use nix::mount::{mount, MsFlags};
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            Ok(mount(
                Some(source),
                at,
                Some("tmpfs"),
                flags,
                Some(opts.as_str()),
            )?)
        };
        let state_opts = format!("size={STATE_FS_BYTES},nr_inodes={STATE_FS_INODES},mode=0755");
        tmpfs("gpu-quota-state", &dir, state_opts)?;
        let rw = dir.join(USAGE_FS_DIR);
        std::fs::create_dir(&rw)?;
        std::fs::set_permissions(&rw, std::fs::Permissions::from_mode(0o755))?;
        if r.share().is_some() {
            // the mount point of the GPU's MPS pipe directory (the hook
            // binds it there, read-only), for a container of its own share
            // and one bound to a claim's alike
            let m = dir.join(crate::formats::mps::PIPE_SUBDIR);
            std::fs::create_dir(&m)?;
            std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o755))?;
        }
        if let (Some(uid), UsageBacking::Tmpfs) = (&r.bound_claim, backing) {
            // the claim's shared usage file (made by the caller, under the
            // ledger's lock), not one of its own
            use nix::mount::{mount, MsFlags};
            let shared = claim_dir(cfg, uid).join(USAGE_FS_DIR);
            return Ok(mount(
                Some(&shared),
                &rw,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )?);
        }
        let usage_opts = format!("size={USAGE_FS_BYTES},nr_inodes={USAGE_FS_INODES},mode=0755");
        tmpfs("gpu-quota-usage", &rw, usage_opts)?;
        write(&usage_path(&dir), b"", 0o666)
    })();
    if let Err(e) = made {
        let _ = remove(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// Fill a directory made by `create`: limits, mount points, driver links
/// (the hook, once it knows the driver files).
pub fn fill(
    dir: &Path,
    r: &Reservation,
    files: &DriverFiles,
    context_overhead: u64,
) -> std::io::Result<()> {
    let m = dir.symlink_metadata()?;
    if !m.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a directory",
        ));
    }
    let text = limits_text(r, context_overhead).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the container id or a GPU UUID cannot be written to the limits file (line break, '#', ',' or surrounding white space)",
        )
    })?;
    write(&dir.join(limits::FILE_NAME), text.as_bytes(), 0o644)?;
    write(
        &dir.join(grant::FILE_NAME),
        &crate::grantfile::bytes(&r.slices)?,
        0o644,
    )?;
    write(&dir.join(usage::FILE_NAME), b"", 0o644)?; // mount point
    write(&dir.join(INTERCEPTOR_NAME), b"", 0o644)?;
    write(&dir.join(PRELOAD_NAME), b"", 0o644)?;
    let d = dir.join(DRIVER_SUBDIR);
    std::fs::create_dir(&d)?;
    for l in &files.libs {
        write(&d.join(&l.name), b"", 0o755)?;
        for a in &l.aliases {
            std::os::unix::fs::symlink(&l.name, d.join(a))?;
        }
    }
    Ok(())
}

/// Remove a state directory, unmounting its tmpfs first (a lazy unmount:
/// a container process still holding a file keeps only its own
/// reference).
pub fn remove(dir: &Path) -> std::io::Result<()> {
    match dir.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(dir),
        Ok(_) => {}
    }
    // the usage tmpfs, then the directory's (earlier releases mounted
    // `rw/` alone; a path that is not a mount point is left alone: EINVAL)
    let detach = nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW;
    let rw = dir.join(USAGE_FS_DIR);
    if rw.is_dir() && !rw.is_symlink() {
        let _ = nix::mount::umount2(&rw, detach);
    }
    let _ = nix::mount::umount2(dir, detach);
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// `gc`'s sweep: remove every directory under `<state_dir>/containers`
/// that belongs to none of `live` (left by a crash, or by a reclaim in an
/// older release). Returns what was removed.
pub fn sweep(cfg: &Config, live: &[Reservation]) -> std::io::Result<Vec<PathBuf>> {
    let c = cfg.state_dir.join("containers");
    let rd = match std::fs::read_dir(&c) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    // a live container created before the upgrade may still use the old name
    let keep: Vec<PathBuf> = live
        .iter()
        .flat_map(|r| [container_dir(cfg, r), legacy_dir(cfg, r)])
        .collect();
    let mut gone = vec![];
    for e in rd.flatten() {
        let p = e.path();
        if !keep.contains(&p) {
            remove(&p)?;
            gone.push(p);
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DriverLib;
    use crate::placement::Slice;

    #[test]
    fn prepare_layout() {
        let d = tempfile::tempdir().unwrap();
        const U: &str = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
        let slice = Slice::memory(U.into(), 3, 4 << 30);
        let r = Reservation::new("c1", None, "/b", vec![slice.clone()], "vram=4g");
        let files = DriverFiles {
            libs: vec![DriverLib {
                host_path: "/x".into(),
                name: "libcuda.so.580".into(),
                aliases: vec!["libcuda.so.1".into()],
            }],
            bins: vec![],
        };
        let cfg = Config {
            state_dir: d.path().join("state"),
            ..Config::default()
        };
        let dir = create(&cfg, &r, UsageBacking::Plain).unwrap();
        fill(&dir, &r, &files, 0).unwrap();
        std::fs::write(dir.join("leftover"), b"x").unwrap();
        let again = create(&cfg, &r, UsageBacking::Plain).unwrap();
        assert_eq!(dir, again);
        assert!(!dir.join("leftover").exists(), "a leftover is replaced");
        fill(&dir, &r, &files, 512 << 20).unwrap();
        let limits = std::fs::read_to_string(dir.join("limits")).unwrap();
        assert!(
            limits.contains("version=2\n")
                && limits.contains(&format!("gpus={U}\n"))
                && !limits.contains("vram_bytes"),
            "{limits}"
        );
        assert!(
            limits.contains("context_overhead_bytes=536870912\n"),
            "{limits}"
        );
        // what the interceptor reads back (the crate's one reader)
        let l = limits::parse(limits.as_bytes());
        assert_eq!((l.version, l.context_overhead_bytes), (2, Some(512 << 20)));
        assert_eq!(l.container_id(), r.container_id.as_bytes());
        // the grant, as placement made it (the one reader reads it back)
        let g = std::fs::read(dir.join(grant::FILE_NAME)).unwrap();
        assert_eq!(grant::decode(&g).unwrap().gpus(), &[slice.raw().unwrap()]);
        // a GPU name that is no UUID cannot be granted: nothing would enforce it
        let mut bad = r.clone();
        bad.slices[0].uuid = "GPU-a".into();
        let dir = create(&cfg, &bad, UsageBacking::Plain).unwrap();
        let e = fill(&dir, &bad, &files, 0).unwrap_err();
        assert!(e.to_string().contains("\"GPU-a\" is not a UUID"), "{e}");
        // an id that would not read back as itself is never written
        let mut bad = r.clone();
        bad.container_id = "c\ncontext_overhead_bytes=0".into();
        assert_eq!(
            fill(&dir, &bad, &files, 0).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
        assert_eq!(
            std::fs::metadata(usage_path(&dir))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o666
        );
        assert_eq!(
            std::fs::metadata(cfg.state_dir.join("containers"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700,
            "containers/ keeps host users out"
        );
        // an older release's 0755 containers/ is narrowed by the next create
        let croot = cfg.state_dir.join("containers");
        std::fs::set_permissions(&croot, std::fs::Permissions::from_mode(0o755)).unwrap();
        create(&cfg, &r, UsageBacking::Plain).unwrap();
        fill(&dir, &r, &files, 0).unwrap();
        assert_eq!(
            std::fs::metadata(&croot).unwrap().permissions().mode() & 0o777,
            0o700,
            "narrowed on upgrade"
        );
        // gc's sweep: a directory no reservation owns goes, a live one stays
        let orphan = cfg.state_dir.join("containers/ghost-0000000000000000");
        std::fs::create_dir(&orphan).unwrap();
        let gone = sweep(&cfg, std::slice::from_ref(&r)).unwrap();
        assert_eq!(gone, vec![orphan.clone()]);
        assert!(!orphan.exists() && dir.is_dir());
        assert_eq!(
            std::fs::read_link(dir.join("driver/libcuda.so.1")).unwrap(),
            Path::new("libcuda.so.580")
        );
        assert_eq!(sweep(&cfg, &[]).unwrap(), vec![dir.clone()]);
        let cfg = Config {
            state_dir: "/s".into(),
            ..Config::default()
        };
        let mut other = r.clone();
        other.bundle = "/other/bundle".into();
        assert!(container_dir(&cfg, &r)
            .to_string_lossy()
            .starts_with("/s/containers/c1-"));
        assert_ne!(
            container_dir(&cfg, &r),
            container_dir(&cfg, &other),
            "same id, other bundle"
        );
        assert_eq!(container_dir(&cfg, &r), container_dir(&cfg, &r.clone()));
        assert!(valid_container_id("0123abc_x.y-z"));
        assert!(
            !valid_container_id("../etc") && !valid_container_id("..") && !valid_container_id("")
        );
    }

    fn res(id: &str, root: Option<&str>, bundle: &str) -> Reservation {
        Reservation::new(id, root, bundle, vec![], "")
    }

    /// The state directory was named by id and bundle only, so
    /// the second `create` of the same id and bundle under another runc
    /// root recreated the first container's directory.
    #[test]
    fn state_directories_are_keyed_by_the_runtime_root() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            state_dir: d.path().join("state"),
            ..Config::default()
        };
        let one = res("dup", Some("/run/one"), "/b/dup");
        let two = res("dup", Some("/run/two"), "/b/dup");
        let dflt = res("dup", None, "/b/dup");
        let empty = res("dup", Some(""), "/b/dup");
        let dirs: Vec<PathBuf> = [&one, &two, &dflt, &empty]
            .iter()
            .map(|r| container_dir(&cfg, r))
            .collect();
        for (i, a) in dirs.iter().enumerate() {
            for b in &dirs[i + 1..] {
                assert_ne!(a, b, "same id and bundle, other root");
            }
        }
        assert_eq!(container_dir(&cfg, &one), container_dir(&cfg, &one.clone()));
        // the parts cannot be shifted into one another
        assert_ne!(
            container_dir(&cfg, &res("a", Some("/r/x"), "/b")),
            container_dir(&cfg, &res("a", Some("/r"), "/x/b"))
        );
        // creating one leaves the other's directory and files alone
        let d1 = create(&cfg, &one, UsageBacking::Plain).unwrap();
        std::fs::write(d1.join("limits"), b"one").unwrap();
        let d2 = create(&cfg, &two, UsageBacking::Plain).unwrap();
        assert_ne!(d1, d2);
        assert_eq!(std::fs::read(d1.join("limits")).unwrap(), b"one");
        remove(&d2).unwrap();
        assert!(d1.join("limits").is_file() && !d2.exists());
    }

    /// Names stay within NAME_MAX for the longest id accepted, and
    /// containers created before the upgrade (old names) keep their state
    /// while held and lose it when released.
    #[test]
    fn long_ids_and_directories_of_an_older_release() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            state_dir: d.path().join("state"),
            ..Config::default()
        };
        let long = "a".repeat(1024);
        assert!(valid_container_id(&long));
        let (x, y) = (format!("{long}x"), format!("{long}y"));
        let nx = dir_name(&x, None, "/b");
        assert!(nx.len() <= 255 && nx.len() == DIR_ID_MAX + 17, "{nx}");
        assert_ne!(nx, dir_name(&y, None, "/b"), "ids past the prefix differ");
        let r = res(&long, Some("/run/one"), "/b");
        let dir = create(&cfg, &r, UsageBacking::Plain).unwrap();
        assert!(dir.is_dir());
        remove(&dir).unwrap();

        // an old-named directory of a live container (same id and bundle
        // under two roots, both created before the upgrade)
        let one = res("old", Some("/run/one"), "/b/old");
        let two = res("old", Some("/run/two"), "/b/old");
        containers_root(&cfg.state_dir).unwrap();
        let old = legacy_dir(&cfg, &one);
        assert_eq!(old, legacy_dir(&cfg, &two));
        assert_ne!(old, container_dir(&cfg, &one));
        std::fs::create_dir(&old).unwrap();
        assert_eq!(existing_dir(&cfg, &one), old, "readers find the old name");
        let orphan = cfg.state_dir.join("containers/old-0000000000000000");
        std::fs::create_dir(&orphan).unwrap();
        assert_eq!(
            sweep(&cfg, &[one.clone(), two.clone()]).unwrap(),
            vec![orphan],
            "gc keeps a held container's old-named directory"
        );
        // releasing one while the other is held keeps it; then it goes
        remove_released(&cfg, &one, Some(std::slice::from_ref(&two))).unwrap();
        assert!(old.is_dir());
        remove_released(&cfg, &two, None).unwrap();
        assert!(old.is_dir(), "ledger unknown: left to gc");
        remove_released(&cfg, &two, Some(&[])).unwrap();
        assert!(!old.exists());
        // a new-named directory is the one found once it exists
        let new = create(&cfg, &one, UsageBacking::Plain).unwrap();
        std::fs::create_dir(&old).unwrap();
        assert_eq!(existing_dir(&cfg, &one), new);
        remove_released(&cfg, &one, Some(&[])).unwrap();
        assert!(!new.exists() && !old.exists());
    }
}
