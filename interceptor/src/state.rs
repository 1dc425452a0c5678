//! Process-wide state: configuration (loaded lazily on the first intercepted
//! call), the accounting region, this process's slot, device mapping, fork
//! handling.

use crate::config::{self, Limits, Size};
use crate::hooks;
use crate::livegrant::LiveGrant;
use crate::ptrtable::Table;
use crate::region::{self, HeaderInit, Region};
use crate::sys::{self, PathBuf};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use gpuquota_formats::grant::FILE_NAME as GRANT_FILE;
use gpuquota_formats::keys;
use gpuquota_formats::limits::FILE_NAME as LIMITS_FILE;
use gpuquota_formats::usage::FILE_NAME as USAGE_FILE;

pub const DEFAULT_STATE_DIR: &[u8] = gpuquota_formats::layout::CONTAINER_DIR.as_bytes();

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    None,
    Container,
    StateDirEnv,
    Env,
}

pub struct Config {
    pub enforce: bool,
    pub source: Source,
    /// Standalone: the slice of every device (GPU_QUOTA_VRAM). A container
    /// enforces its grant per GPU instead (`grant`, `cap`).
    pub limit: Size,
    /// A container's grant, mapped live (None in a container: the file is
    /// missing or invalid, and all device memory is refused).
    pub grant: Option<LiveGrant>,
    /// A container's GPU_QUOTA_VRAM in bytes: it can only lower the grant
    /// (u64::MAX: none).
    pub cap: u64,
    pub ctx_overhead: u64,
    pub usage_path: PathBuf,
    pub create_usage: bool,
    pub limits: Limits,
    /// GPU_QUOTA_DEBUG=1: log configuration, intercepted dlsym and
    /// cuGetProcAddress decisions to stderr
    pub debug: bool,
}

impl Config {
    /// A container's (or GPU_QUOTA_STATE_DIR's) limits: enforced per GPU
    /// from the grant.
    pub fn from_grant(&self) -> bool {
        matches!(self.source, Source::Container | Source::StateDirEnv)
    }

    /// The slice of a GPU named by UUID, when the configuration says it
    /// without asking the driver: a container's live grant entry (0 for a
    /// GPU the grant lacks, and for every GPU without a valid grant), a
    /// standalone byte size. None: a percentage (of a total to ask for).
    /// A burstable slice's limit on a GPU named by UUID (None: guaranteed,
    /// standalone, or not one of the grant's GPUs).
    pub fn burst_of_uuid(&self, uuid: &[u8; 16]) -> Option<u64> {
        if !self.from_grant() {
            return None;
        }
        let g = self.grant.as_ref()?;
        g.burst_limit(g.entry_of(uuid)?).map(|l| l.min(self.cap))
    }

    #[inline]
    pub fn slice_of_uuid(&self, uuid: &[u8; 16]) -> Option<u64> {
        if self.from_grant() {
            let g = self.grant.as_ref()?;
            return Some(g.entry_of(uuid).map_or(0, |e| g.vram(e).min(self.cap)));
        }
        match self.limit {
            Size::Bytes(b) => Some(b),
            Size::Ppm(_) => None,
        }
    }
}

struct Cell(UnsafeCell<Config>);
unsafe impl Sync for Cell {}

static CFG: Cell = Cell(UnsafeCell::new(Config {
    enforce: false,
    source: Source::None,
    limit: Size::Bytes(0),
    grant: None,
    cap: u64::MAX,
    ctx_overhead: 0,
    usage_path: PathBuf::empty(),
    create_usage: false,
    limits: Limits::empty(),
    debug: false,
}));

// STATE = phase | pid << 8: a fork() while another thread initialises
// leaves the child with a BUSY word of the parent's pid, which the child
// recognises (no thread of the child is initialising) and restarts.
const ST_UNINIT: u64 = 0;
const ST_BUSY: u64 = 1;
const ST_READY: u64 = 2;
static STATE: AtomicU64 = AtomicU64::new(ST_UNINIT);
static INIT_TID: AtomicI64 = AtomicI64::new(0);

/// The configuration, loading it on first use. None while this very thread
/// is loading it (re-entrancy): callers then pass through.
#[inline]
pub fn config() -> Option<&'static Config> {
    if STATE.load(Acquire) & 0xff == ST_READY {
        return Some(unsafe { &*CFG.0.get() });
    }
    init_slow()
}

#[cold]
fn init_slow() -> Option<&'static Config> {
    let pid = sys::getpid() as u32 as u64;
    loop {
        let cur = STATE.load(Acquire);
        match cur & 0xff {
            ST_READY => return Some(unsafe { &*CFG.0.get() }),
            ST_UNINIT => {
                if STATE
                    .compare_exchange(cur, ST_BUSY | pid << 8, AcqRel, Acquire)
                    .is_ok()
                {
                    INIT_TID.store(sys::gettid(), Release);
                    unsafe { load_config(&mut *CFG.0.get()) };
                    register_atfork();
                    STATE.store(ST_READY | pid << 8, Release);
                    return Some(unsafe { &*CFG.0.get() });
                }
            }
            _ => {
                if cur >> 8 != pid {
                    // forked while the parent was initialising: start over
                    let _ = STATE.compare_exchange(cur, ST_UNINIT, AcqRel, Acquire);
                    continue;
                }
                if INIT_TID.load(Acquire) == sys::gettid() {
                    return None;
                }
                unsafe { libc::sched_yield() };
            }
        }
    }
}

unsafe fn load_config(c: &mut Config) {
    c.debug = matches!(sys::getenv(keys::ENV_DEBUG_C), Some(v) if !v.is_empty() && v != b"0");
    load_config_inner(c);
    if c.debug {
        let mut b = crate::fmt::Buf::<768>::new();
        b.push(b"gpu-quota[debug]: pid ");
        b.push_u64(sys::getpid() as u64);
        b.push(if c.enforce {
            b" enforcing"
        } else {
            b" pass-through"
        });
        b.push(match c.source {
            Source::Container => b" (limits from /run/gpu-quota)",
            Source::StateDirEnv => b" (limits from GPU_QUOTA_STATE_DIR)",
            Source::Env => b" (GPU_QUOTA_VRAM)",
            Source::None => b"",
        });
        match (c.from_grant(), c.limit) {
            (true, _) => {
                let n = c.grant.map_or(0, |g| g.table.n);
                b.push(b" slice per GPU from the grant (");
                b.push_u64(n as u64);
                b.push(b" GPUs)");
                if c.cap != u64::MAX {
                    b.push(b", at most ");
                    b.push_size(c.cap);
                }
            }
            (false, Size::Bytes(v)) => {
                b.push(b" slice ");
                b.push_size(v);
            }
            (false, Size::Ppm(p)) => {
                b.push(b" slice ");
                b.push_u64(p as u64 / 10_000);
                b.push(b"% of each device");
            }
        }
        b.push(b", context overhead ");
        b.push_size(c.ctx_overhead);
        b.push(b", usage ");
        if c.usage_path.len > 0 {
            b.push(c.usage_path.bytes());
        } else {
            b.push(b"<private>");
        }
        b.push(b"\n");
        sys::write_stderr(b.bytes());
    }
}

/// Debug line (only with GPU_QUOTA_DEBUG): prefix + C name + suffix parts.
pub fn debug(parts: &[&[u8]]) {
    if let Some(c) = config() {
        if c.debug {
            let mut b = crate::fmt::Buf::<256>::new();
            b.push(b"gpu-quota[debug]: ");
            for p in parts {
                b.push(p);
            }
            b.push(b"\n");
            sys::write_stderr(b.bytes());
        }
    }
}

pub fn debug_enabled() -> bool {
    config().map(|c| c.debug).unwrap_or(false)
}

unsafe fn load_config_inner(c: &mut Config) {
    // 1. the hook's state directory (wins; env can only lower the limit)
    let mut dir: Option<PathBuf> = None;
    let mut src = Source::None;
    if let Some(p) = PathBuf::join(DEFAULT_STATE_DIR, LIMITS_FILE.as_bytes()) {
        if sys::file_exists(p.as_cstr()) {
            dir = PathBuf::from_bytes(DEFAULT_STATE_DIR);
            src = Source::Container;
        }
    }
    if dir.is_none() {
        if let Some(d) = sys::getenv(keys::ENV_STATE_DIR_C) {
            if let Some(p) = PathBuf::join(d, LIMITS_FILE.as_bytes()) {
                if sys::file_exists(p.as_cstr()) {
                    dir = PathBuf::from_bytes(d);
                    src = Source::StateDirEnv;
                }
            }
        }
    }
    let env_vram = sys::getenv(keys::ENV_VRAM_C).and_then(config::parse_size);
    let env_overhead = sys::getenv(keys::ENV_CONTEXT_OVERHEAD_C).and_then(config::parse_size);
    if let Some(d) = dir {
        let lp = PathBuf::join(d.bytes(), LIMITS_FILE.as_bytes()).unwrap();
        let mut buf = [0u8; 8192];
        let n = sys::read_file(lp.as_ptr(), &mut buf).unwrap_or(0);
        let l = config::parse_limits(&buf[..n]);
        c.limits = l;
        c.source = src;
        c.enforce = true;
        // The slice of each GPU is the host's grant, read live at every
        // admission; the limits file's sizes (an older hook's) are not
        // read. Fail closed: no valid grant, no device memory.
        c.limit = Size::Bytes(0);
        let gp = PathBuf::join(d.bytes(), GRANT_FILE.as_bytes());
        c.grant = gp.as_ref().and_then(|p| LiveGrant::open(p.as_cstr()));
        match c.grant {
            Some(g) => {
                // the grant names the slice's GPUs (a GPU outside it gets nothing)
                let t = &g.table;
                for (i, e) in t.gpus().iter().enumerate() {
                    c.limits.gpus[i] = e.uuid;
                }
                c.limits.ngpus = t.n;
                c.limits.bad_gpus = false;
            }
            None => {
                let mut b = crate::fmt::Buf::<640>::new();
                b.push(b"gpu-quota: cannot use ");
                b.push(gp.as_ref().map_or(&b"grant"[..], |p| p.bytes()));
                b.push(b" (missing, or not a grant file): refusing all device memory\n");
                sys::write_stderr(b.bytes());
            }
        }
        if let Some(Size::Bytes(e)) = env_vram {
            c.cap = e;
        }
        c.ctx_overhead = l.context_overhead_bytes.unwrap_or(0);
        region::set_my_group(l.consumer_group);
        if let Some(u) = PathBuf::join(d.bytes(), USAGE_FILE.as_bytes()) {
            c.usage_path = u;
        }
        c.create_usage = false;
        return;
    }
    // 2. standalone: env
    if let Some(v) = env_vram {
        c.enforce = true;
        c.source = Source::Env;
        c.limit = v;
        // a simulated card holds its context too: the env key
        // overrides (0 = none), else the host's measured cost, else the
        // built-in default
        c.ctx_overhead = match env_overhead {
            Some(Size::Bytes(o)) => o,
            _ => standalone_ctx_default(),
        };
        if let Some(p) = sys::getenv(keys::ENV_USAGE_FILE_C) {
            if let Some(pb) = PathBuf::from_bytes(p) {
                c.usage_path = pb;
                c.create_usage = true;
            }
        }
        return;
    }
    if sys::getenv(keys::ENV_VRAM_C).is_some() {
        sys::write_stderr(b"gpu-quota: cannot parse GPU_QUOTA_VRAM; not enforcing\n");
    }
    c.enforce = false;
}

/// The host's measured context cost (the hook's cache), else the built-in
/// default. GPU_QUOTA_CONTEXT_COST_FILE names another cache file.
unsafe fn standalone_ctx_default() -> u64 {
    let mut buf = [0u8; 16384];
    let n = match sys::getenv(keys::ENV_CONTEXT_COST_FILE_C) {
        Some(p) => match PathBuf::from_bytes(p) {
            Some(pb) => sys::read_file_nofollow(pb.as_ptr(), &mut buf),
            None => None,
        },
        None => gpuquota_formats::ctxcost::read_standalone_cache(
            |p, b| sys::read_file_nofollow(p.as_ptr(), b),
            &mut buf,
        ),
    };
    n.and_then(|n| config::ctxcost_from_cache(&buf[..n]))
        .unwrap_or(config::BUILTIN_CTX_OVERHEAD)
}

// ---------------------------------------------------------------- region

static REGION_STATE: AtomicU32 = AtomicU32::new(0); // 0 none, 1 opening, 2 ready, 3 failed
static REGION_OPENER: AtomicU32 = AtomicU32::new(0); // pid that set 1
/// The container's usage file is unusable: refuse every allocation.
static FAILED_CLOSED: AtomicU8 = AtomicU8::new(0);

/// True when this process enforces a container slice but has no usable
/// shared usage file: every allocation is refused.
#[inline]
pub fn failed_closed() -> bool {
    FAILED_CLOSED.load(Relaxed) != 0
}
static REGION_BASE: AtomicUsize = AtomicUsize::new(0);
static REGION_SHARED: AtomicU8 = AtomicU8::new(0);

pub fn region() -> Option<Region> {
    if REGION_STATE.load(Acquire) == 2 {
        return Some(make_region());
    }
    region_slow()
}

fn make_region() -> Region {
    // SAFETY: validated when opened; layout constants fixed for version 1
    unsafe {
        Region::from_validated(
            REGION_BASE.load(Acquire) as *mut u8,
            REGION_SHARED.load(Acquire) != 0,
        )
    }
}

#[cold]
fn region_slow() -> Option<Region> {
    let c = config()?;
    if !c.enforce {
        return None;
    }
    let pid = sys::getpid() as u32;
    loop {
        match REGION_STATE.compare_exchange(0, 1, AcqRel, Acquire) {
            Ok(_) => {
                REGION_OPENER.store(pid, Release);
                break;
            }
            Err(2) => return Some(make_region()),
            Err(3) => return None,
            Err(_) => {
                if REGION_OPENER.load(Acquire) != pid && REGION_OPENER.load(Acquire) != 0 {
                    // forked while the parent was opening: start over
                    REGION_OPENER.store(0, Release);
                    let _ = REGION_STATE.compare_exchange(1, 0, AcqRel, Acquire);
                    continue;
                }
                unsafe { libc::sched_yield() };
            }
        }
    }
    // a container's header limits are display copies of the grant, set
    // per GPU once the region is open
    let limit0 = match c.limit {
        Size::Bytes(b) if !c.from_grant() => b,
        _ => 0,
    };
    let mut flags = 0;
    if c.source == Source::Container || c.source == Source::StateDirEnv {
        flags |= region::FLAG_CONTAINER;
    }
    if let Size::Ppm(_) = c.limit {
        flags |= region::FLAG_PERCENT;
    }
    let init = HeaderInit {
        flags,
        limit: limit0,
        ctx_overhead: c.ctx_overhead,
        container_id: c.limits.container_id(),
        uuids: c.limits.gpus(),
    };
    let container = c.source == Source::Container || c.source == Source::StateDirEnv;
    let mut r = None;
    if c.usage_path.len > 0 {
        match Region::open_file(c.usage_path.as_cstr(), c.create_usage, &init) {
            Ok(x) => {
                if let Some(g) = c.grant {
                    for e in g.table.gpus() {
                        if let Some(i) = x.uuid_index(&e.uuid, true) {
                            x.show_limit(i, c.slice_of_uuid(&e.uuid).unwrap_or(0));
                        }
                    }
                }
                r = Some(x)
            }
            Err(e) => {
                let mut b = crate::fmt::Buf::<640>::new();
                b.push(b"gpu-quota: cannot use ");
                b.push(c.usage_path.bytes());
                b.push(match e {
                    region::OpenError::Open => b" (cannot open it)" as &[u8],
                    region::OpenError::Map => b" (mmap/ftruncate failed)",
                    region::OpenError::Incompatible => {
                        b" (foreign or incompatible format: wrong magic, version, size or layout)"
                    }
                });
                if container {
                    b.push(b": refusing all device memory\n");
                } else {
                    b.push(b"; budget is per process\n");
                }
                sys::write_stderr(b.bytes());
            }
        }
    }
    if r.is_none() && container {
        // Fail closed: a container never falls back to a private budget.
        FAILED_CLOSED.store(1, Relaxed);
        REGION_STATE.store(3, Release);
        return None;
    }
    if r.is_none() {
        r = Region::anonymous(&init);
    }
    match r {
        Some(x) => {
            // Slots carrying this very (pid, start time) belong to an earlier
            // image of this process (it exec'd; this image has no slot yet).
            if x.shared {
                x.reclaim_word(region::owner_word(
                    pid as i32,
                    sys::proc_start_time(pid as i32),
                ));
            }
            REGION_BASE.store(x.base() as usize, Release);
            REGION_SHARED.store(x.shared as u8, Release);
            REGION_STATE.store(2, Release);
            Some(x)
        }
        None => {
            REGION_STATE.store(3, Release);
            None
        }
    }
}

// ---------------------------------------------------------------- slot

static MY_SLOT: AtomicUsize = AtomicUsize::new(usize::MAX);
static SLOT_LOCK: AtomicU32 = AtomicU32::new(0);

/// This process's slot (claimed on first use).
#[inline]
pub fn my_slot(r: &Region) -> Option<usize> {
    let s = MY_SLOT.load(Acquire);
    if s != usize::MAX {
        return Some(s);
    }
    claim_slow(r)
}

#[cold]
fn claim_slow(r: &Region) -> Option<usize> {
    // one claimer per process; others wait (init only, never across a driver call)
    while SLOT_LOCK.compare_exchange(0, 1, Acquire, Relaxed).is_err() {
        unsafe { libc::sched_yield() };
    }
    let mut s = MY_SLOT.load(Acquire);
    if s == usize::MAX {
        let pid = sys::getpid();
        let st = sys::proc_start_time(pid);
        if let Some(x) = r.claim_slot(pid, st, &region::owner_alive) {
            s = x;
            MY_SLOT.store(s, Release);
        }
    }
    SLOT_LOCK.store(0, Release);
    if s == usize::MAX {
        None
    } else {
        Some(s)
    }
}

// ---------------------------------------------------------------- pointers

pub static TABLE: Table = Table::new();

// ---------------------------------------------------------------- fork

// The one child handler runs what each module registered in hooks::FORK
// (this module's own reset first: it is registered at init, before any
// other module holds state).
extern "C" fn atfork_child() {
    hooks::FORK.run(hooks::ALL);
}

/// The child is not the parent: no slot, no pointers, and a private
/// (per-process) region must not carry the parent's usage.
fn fork_reset(_: usize) -> bool {
    MY_SLOT.store(usize::MAX, Release);
    SLOT_LOCK.store(0, Release);
    TABLE.reset();
    if REGION_STATE.load(Acquire) == 2 && REGION_SHARED.load(Acquire) == 0 {
        unsafe { make_region().unmap() };
        REGION_BASE.store(0, Release);
        REGION_STATE.store(0, Release);
    }
    false
}

fn register_atfork() {
    hooks::FORK.register(fork_reset);
    unsafe {
        libc::pthread_atfork(None, None, Some(atfork_child));
    }
}

pub fn my_slot_if_any() -> usize {
    MY_SLOT.load(Acquire)
}
