//! The grant: what a container holds on each GPU, as one value from
//! placement to enforcement.
//!
//! [`GpuGrant`] is produced by placement (core), stored as itself in the
//! ledger record (JSON, through the `serde` feature), written verbatim into
//! the container's `grant` file (below) and enforced per GPU by
//! libgpuquota.so and by the driver-level limit. Nothing between re-decides a
//! size.
//!
//! # The `grant` file
//!
//! Host: `<state_dir>/containers/<dir>/grant`; container:
//! `/run/gpu-quota/grant`, inside the read-only bind of the state directory,
//! so nothing in the container can change it. One writer ([`encode`], the
//! host, before the container starts), one reader ([`decode`], the
//! interceptor, which maps the file once). The `vram_bytes` of each entry is
//! the **live** limit: the host may change it while the container runs with
//! one aligned 8-byte atomic store through its own mapping
//! ([`vram_offset`]), and the interceptor loads it atomically at every
//! admission. Everything else in the file never changes after it is written.
//!
//! Layout (little-endian, [`SIZE`] bytes):
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic [`MAGIC`] (u64) |
//! | 8 | version: [`VERSION`] (u32), [`VERSION_PROCS`] where the grant holds a compute share |
//! | 12 | entries in use, at most [`MAX_GPUS`] (u32) |
//! | 16..64 | reserved, 0 |
//! | 64 + i × 64 | entry i: uuid (16 raw bytes, as cuDeviceGetUuid), host index (u32), compute share in percent of the GPU's SMs (u32, 0: none), vram_bytes (u64, live: the guarantee), the share's host uid recorded (u32, 1) or not (0), that uid (u32), the CUDA processes the share is split over (u32, version 2 only; 0 without a share), the burst priority (u32 at 44, version 3), the burst limit (u64 at 48, version 3; 0: none), the reclaim word (u64 at 56, live, [`reclaim_offset`]; only the host stores it) |
//!
//! A grant with a compute share is written as version 2: a reader of
//! version 1 (a libgpuquota.so from before `sm-procs`) would let every
//! process of the container take the whole share, and refuses the file
//! instead, which fails closed (no device memory). A version-1 file with a
//! share (from a host before `sm-procs`) reads as a share of one process.
use crate::limits::parse_uuid;

pub const FILE_NAME: &str = "grant";
/// The bytes "GQGRANT1" as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GQGRANT1");
pub const VERSION: u32 = 1;
/// The version of a grant that holds a compute share (with its process
/// count at [`E_SM_PROCS`]).
pub const VERSION_PROCS: u32 = 2;
/// The version of a grant with a burst limit on some GPU.
pub const VERSION_BURST: u32 = 3;
pub const HEADER_SIZE: usize = 64;
pub const ENTRY_SIZE: usize = 64;
/// GPUs one grant holds (the usage header's device table).
pub const MAX_GPUS: usize = crate::usage::DEV_COUNT;
pub const SIZE: usize = HEADER_SIZE + MAX_GPUS * ENTRY_SIZE;

const E_UUID: usize = 0;
const E_INDEX: usize = 16;
const E_SM: usize = 20;
const E_VRAM: usize = 24;
const E_SM_USER_SET: usize = 32;
const E_SM_USER: usize = 36;
const E_SM_PROCS: usize = 40;
const E_PRIORITY: usize = 44;
const E_LIMIT: usize = 48;
const E_RECLAIM: usize = 56;

/// Lent memory beside a guarantee: a burstable slice. Past its
/// `vram_bytes`, up to `limit_bytes`, the container's allocations are
/// evictable memory lent from what nobody uses at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Burst {
    /// The most the container may hold on this GPU, guarantee included.
    #[cfg_attr(feature = "serde", serde(rename = "limit"))]
    pub limit_bytes: u64,
    /// Among bursters on a GPU, who gives back first: the lowest, then the
    /// newest. 0 to [`PRIORITY_MAX`].
    #[cfg_attr(feature = "serde", serde(default))]
    pub priority: u32,
}

/// The highest burst priority.
pub const PRIORITY_MAX: u32 = 1000;

/// One GPU's share of a grant. `U` is how the GPU is named: the host keeps
/// NVML's text UUID (`GPU-…`), the file and the interceptor the 16 raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GpuGrant<U> {
    pub uuid: U,
    /// The GPU's host index (nvidia-smi's), for messages and the device nodes.
    pub index: u32,
    /// The memory slice on this GPU. The ledger's JSON calls it `bytes`,
    /// as it did before the grant was a type of its own.
    #[cfg_attr(feature = "serde", serde(rename = "bytes"))]
    pub vram_bytes: u64,
    /// The compute share on this GPU, in percent of its SMs (1–100), served
    /// through the GPU's MPS daemon; 0: no share (the container is not an
    /// MPS client). Fixed for the container's life. The ledger's JSON
    /// leaves it out when 0, so records written before it read as no share.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "sm", default, skip_serializing_if = "is_zero")
    )]
    pub sm_percent: u32,
    /// With a share: the host uid it was admitted for. MPS takes commands
    /// that steer a GPU's server from host root on the client socket, so a
    /// share is admitted for a user that cannot become root (unless the
    /// operator allows root's), and the interceptor refuses `cuInit` to a
    /// host-root process in a share of another user (`exec --user 0`).
    /// gpu-quota's daemons are multi-user: shares of different uids share a
    /// GPU. `None`: no share, or one admitted before the uid was recorded.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub sm_user: Option<u32>,
    /// With a share: the number of CUDA processes it is split over
    /// (`sm-procs=`, 1–64), decided once at admission. MPS bounds each
    /// client process, not a container, so each of these processes runs at
    /// `sm_percent / sm_procs` ([`crate::mps::client_share`]) and the
    /// interceptor refuses `cuInit` to one more. 0 without a share; the
    /// ledger's JSON leaves it out when 0 (a share recorded before the count
    /// existed is of one process: the ledger reads it so).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_zero"))]
    pub sm_procs: u32,
    /// A burst limit above `vram_bytes` (which is then the guarantee);
    /// `None`: a guaranteed slice. Never with a compute share. The
    /// ledger's JSON leaves it out when `None`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub burst: Option<Burst>,
}

#[cfg(feature = "serde")]
fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// The most a compute share can be: the whole GPU.
pub const SM_MAX: u32 = 100;

/// The GPU of a grant's compute share. A share is of one GPU: each GPU with
/// shares has its own MPS daemon and a process joins one, so a grant holds
/// a share only as its one GPU. Everything past placement asks this, and
/// the grant file refuses any other shape.
pub fn share<U>(gpus: &[GpuGrant<U>]) -> Option<&GpuGrant<U>> {
    match gpus {
        [g] if g.sm_percent > 0 => Some(g),
        _ => None,
    }
}

/// A share on a grant of several GPUs (which [`share`] would not see).
fn stray_share<U>(gpus: &[GpuGrant<U>]) -> bool {
    gpus.len() > 1 && gpus.iter().any(|g| g.sm_percent > 0)
}

/// A GPU's name in raw bytes.
pub type Uuid = [u8; 16];

impl<U> GpuGrant<U> {
    /// `vram_bytes` of GPU `uuid` (host index `index`), without a compute
    /// share.
    pub fn memory(uuid: U, index: u32, vram_bytes: u64) -> Self {
        GpuGrant {
            uuid,
            index,
            vram_bytes,
            sm_percent: 0,
            sm_user: None,
            sm_procs: 0,
            burst: None,
        }
    }
}

impl<U: AsRef<str>> GpuGrant<U> {
    /// The same grant naming its GPU by raw bytes (`None`: the text is not
    /// a UUID).
    pub fn raw(&self) -> Option<GpuGrant<Uuid>> {
        Some(GpuGrant {
            uuid: parse_uuid(self.uuid.as_ref().as_bytes())?,
            index: self.index,
            vram_bytes: self.vram_bytes,
            sm_percent: self.sm_percent,
            sm_user: self.sm_user,
            sm_procs: self.sm_procs,
            burst: self.burst,
        })
    }
}

/// A decoded `grant` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub n: usize,
    pub gpus: [GpuGrant<Uuid>; MAX_GPUS],
}

impl Table {
    pub fn gpus(&self) -> &[GpuGrant<Uuid>] {
        &self.gpus[..self.n]
    }
    /// The entry of one GPU.
    pub fn position(&self, uuid: &Uuid) -> Option<usize> {
        self.gpus().iter().position(|g| &g.uuid == uuid)
    }
}

/// Why a grant cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// More GPUs than [`MAX_GPUS`].
    TooManyGpus(usize),
    /// The same GPU twice: a reader could not tell which entry counts.
    DuplicateGpu(usize),
    /// A compute share on a grant of several GPUs (see [`share`]).
    ShareOfSeveral,
    /// A compute share split over no process or more than
    /// [`crate::mps::PROCS_MAX`], or a process count without a share.
    BadProcs(u32),
    /// A burst limit below the guarantee, a priority past
    /// [`PRIORITY_MAX`], or a burst beside a compute share.
    BadBurst,
}

impl core::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EncodeError::TooManyGpus(n) => {
                write!(f, "a grant holds at most {MAX_GPUS} GPUs, not {n}")
            }
            EncodeError::DuplicateGpu(i) => {
                write!(f, "GPU entry {i} of the grant repeats an earlier one")
            }
            EncodeError::ShareOfSeveral => {
                write!(
                    f,
                    "a compute share is of one GPU, and this grant has several"
                )
            }
            EncodeError::BadProcs(n) => write!(
                f,
                "a compute share is split over 1 to {} CUDA processes, and only a share is; this grant says {n}",
                crate::mps::PROCS_MAX
            ),
            EncodeError::BadBurst => write!(
                f,
                "a burst limit is at least its guarantee, its priority at most {PRIORITY_MAX}, and it never comes with a compute share"
            ),
        }
    }
}

/// The `grant` file of a grant.
pub fn encode(grant: &[GpuGrant<Uuid>]) -> Result<[u8; SIZE], EncodeError> {
    if grant.len() > MAX_GPUS {
        return Err(EncodeError::TooManyGpus(grant.len()));
    }
    for (i, g) in grant.iter().enumerate() {
        if grant[..i].iter().any(|h| h.uuid == g.uuid) {
            return Err(EncodeError::DuplicateGpu(i));
        }
    }
    if stray_share(grant) {
        return Err(EncodeError::ShareOfSeveral);
    }
    if let Some(g) = grant.iter().find(|g| !procs_fit(g.sm_percent, g.sm_procs)) {
        return Err(EncodeError::BadProcs(g.sm_procs));
    }
    if grant.iter().any(|g| !burst_fits(g)) {
        return Err(EncodeError::BadBurst);
    }
    let version = if share(grant).is_some() {
        VERSION_PROCS
    } else if grant.iter().any(|g| g.burst.is_some()) {
        VERSION_BURST
    } else {
        VERSION
    };
    let mut b = [0u8; SIZE];
    b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[12..16].copy_from_slice(&(grant.len() as u32).to_le_bytes());
    for (i, g) in grant.iter().enumerate() {
        let e = HEADER_SIZE + i * ENTRY_SIZE;
        b[e + E_UUID..e + E_UUID + 16].copy_from_slice(&g.uuid);
        b[e + E_INDEX..e + E_INDEX + 4].copy_from_slice(&g.index.to_le_bytes());
        b[e + E_SM..e + E_SM + 4].copy_from_slice(&g.sm_percent.to_le_bytes());
        b[e + E_VRAM..e + E_VRAM + 8].copy_from_slice(&g.vram_bytes.to_le_bytes());
        if let Some(u) = g.sm_user {
            b[e + E_SM_USER_SET..e + E_SM_USER_SET + 4].copy_from_slice(&1u32.to_le_bytes());
            b[e + E_SM_USER..e + E_SM_USER + 4].copy_from_slice(&u.to_le_bytes());
        }
        b[e + E_SM_PROCS..e + E_SM_PROCS + 4].copy_from_slice(&g.sm_procs.to_le_bytes());
        if let Some(x) = g.burst {
            b[e + E_PRIORITY..e + E_PRIORITY + 4].copy_from_slice(&x.priority.to_le_bytes());
            b[e + E_LIMIT..e + E_LIMIT + 8].copy_from_slice(&x.limit_bytes.to_le_bytes());
        }
    }
    Ok(b)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(x)
}

/// Read a `grant` file: `None` unless it is exactly [`SIZE`] bytes with the
/// magic, the version and a count within [`MAX_GPUS`], and no GPU twice.
/// The `vram_bytes` read here are a snapshot; a reader that enforces them
/// loads [`vram_offset`] again at every admission.
pub fn decode(b: &[u8]) -> Option<Table> {
    if b.len() != SIZE || u64_at(b, 0) != MAGIC {
        return None;
    }
    let version = u32_at(b, 8);
    if !matches!(version, VERSION | VERSION_PROCS | VERSION_BURST) {
        return None;
    }
    let n = u32_at(b, 12) as usize;
    if n > MAX_GPUS {
        return None;
    }
    let mut t = Table {
        n,
        gpus: [GpuGrant::default(); MAX_GPUS],
    };
    for i in 0..n {
        let e = HEADER_SIZE + i * ENTRY_SIZE;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[e + E_UUID..e + E_UUID + 16]);
        if t.gpus[..i].iter().any(|g| g.uuid == uuid) {
            return None;
        }
        t.gpus[i] = GpuGrant {
            uuid,
            index: u32_at(b, e + E_INDEX),
            vram_bytes: u64_at(b, e + E_VRAM),
            sm_percent: u32_at(b, e + E_SM),
            sm_user: match u32_at(b, e + E_SM_USER_SET) {
                0 => None,
                1 => Some(u32_at(b, e + E_SM_USER)),
                _ => return None,
            },
            sm_procs: match (version, u32_at(b, e + E_SM)) {
                (VERSION_PROCS, _) => u32_at(b, e + E_SM_PROCS),
                // before the count: a share of one process
                (_, 0) => 0,
                _ => 1,
            },
            burst: match (version, u64_at(b, e + E_LIMIT)) {
                (VERSION_BURST, limit) if limit > 0 => Some(Burst {
                    limit_bytes: limit,
                    priority: u32_at(b, e + E_PRIORITY),
                }),
                _ => None,
            },
        };
        let g = &t.gpus[i];
        if g.sm_percent > SM_MAX || !procs_fit(g.sm_percent, g.sm_procs) || !burst_fits(g) {
            return None;
        }
    }
    if stray_share(t.gpus()) {
        return None;
    }
    Some(t)
}

/// Whether a burst goes with its entry: a limit at least the guarantee, a
/// priority within bounds, no compute share beside it.
fn burst_fits<U>(g: &GpuGrant<U>) -> bool {
    match g.burst {
        None => true,
        Some(x) => x.limit_bytes >= g.vram_bytes && x.priority <= PRIORITY_MAX && g.sm_percent == 0,
    }
}

/// Whether a process count goes with a share: 1 to
/// [`crate::mps::PROCS_MAX`] with one, 0 without.
fn procs_fit(sm_percent: u32, sm_procs: u32) -> bool {
    match sm_percent {
        0 => sm_procs == 0,
        _ => (1..=crate::mps::PROCS_MAX).contains(&sm_procs),
    }
}

/// Offset of entry `i`'s live `vram_bytes` (8-byte aligned: one atomic
/// store by the host, one atomic load by a reader).
pub const fn vram_offset(i: usize) -> usize {
    HEADER_SIZE + i * ENTRY_SIZE + E_VRAM
}

/// Offset of entry `i`'s live reclaim word (8-byte aligned). Only the
/// host's burst supervisor stores it, while bursters share the entry's GPU:
/// the milliseconds an allocation within the guarantee that the driver
/// refused may wait for bursters to be ended ([`reclaim_wait_ms`]). 0: no
/// burster there, or no supervisor: such a refusal is final at once.
pub const fn reclaim_offset(i: usize) -> usize {
    HEADER_SIZE + i * ENTRY_SIZE + E_RECLAIM
}

/// The wait a reclaim word grants (bounded: a word from a broken host
/// never makes an allocation wait longer than [`RECLAIM_WAIT_MAX_MS`]).
pub const fn reclaim_wait_ms(word: u64) -> u64 {
    if word > RECLAIM_WAIT_MAX_MS {
        RECLAIM_WAIT_MAX_MS
    } else {
        word
    }
}

/// The longest any allocation waits for a reclaim: 5 minutes.
pub const RECLAIM_WAIT_MAX_MS: u64 = 300_000;

const _: () = {
    assert!(vram_offset(0) % 8 == 0 && ENTRY_SIZE % 8 == 0 && HEADER_SIZE % 8 == 0);
    assert!(E_VRAM + 8 <= ENTRY_SIZE && E_SM_PROCS + 4 <= ENTRY_SIZE);
    assert!(E_SM_PROCS + 4 <= E_PRIORITY && E_PRIORITY + 4 <= E_LIMIT);
    assert!(E_LIMIT % 8 == 0 && E_RECLAIM % 8 == 0 && E_RECLAIM + 8 == ENTRY_SIZE);
};

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;

    fn g(u: u8, index: u32, vram_bytes: u64) -> GpuGrant<Uuid> {
        GpuGrant::memory([u; 16], index, vram_bytes)
    }

    #[test]
    fn a_compute_share_travels_and_a_bad_one_is_refused() {
        let mut one = g(1, 0, G);
        one.sm_percent = 25;
        one.sm_procs = 1;
        let t = decode(&encode(&[one]).unwrap()).unwrap();
        assert_eq!(t.gpus[0].sm_user, None, "no uid recorded");
        one.sm_user = Some(0);
        let t = decode(&encode(&[one]).unwrap()).unwrap();
        assert_eq!(t.gpus[0].sm_user, Some(0), "root, told from none");
        one.sm_user = Some(1000);
        let mut b = encode(&[one]).unwrap();
        let t = decode(&b).unwrap();
        assert_eq!((t.gpus[0].sm_percent, t.gpus[0].sm_user), (25, Some(1000)));
        b[HEADER_SIZE + E_SM_USER_SET] = 2;
        assert!(decode(&b).is_none(), "a flag that is neither");
        b[HEADER_SIZE + E_SM_USER_SET] = 1;
        assert_eq!(share(t.gpus()).map(|s| s.uuid), Some([1; 16]));
        b[HEADER_SIZE + E_SM] = 101;
        assert!(decode(&b).is_none(), "a share over the whole GPU");
    }

    #[test]
    fn a_share_is_of_one_gpu_only() {
        let mut one = g(1, 0, G);
        one.sm_percent = 25;
        one.sm_procs = 1;
        assert_eq!(share(&[g(1, 0, G)]), None, "no share");
        assert_eq!(share(&[one, g(2, 1, G)]), None);
        assert_eq!(encode(&[one, g(2, 1, G)]), Err(EncodeError::ShareOfSeveral));
        // a file with the share on its second GPU, written by hand
        let mut b = encode(&[g(2, 1, G), g(1, 0, G)]).unwrap();
        assert!(decode(&b).is_some());
        b[HEADER_SIZE + ENTRY_SIZE + E_SM] = 25;
        assert!(decode(&b).is_none(), "a share beside another GPU");
    }

    /// The share's process count travels in a version-2 file, which a
    /// reader of version 1 (before the count) refuses: it would let every
    /// process take the whole share.
    #[test]
    fn a_shares_process_count_travels_and_older_readers_refuse_it() {
        let mut one = g(1, 0, G);
        one.sm_percent = 25;
        one.sm_procs = 4;
        let b = encode(&[one]).unwrap();
        assert_eq!(u32_at(&b, 8), VERSION_PROCS);
        assert_eq!(decode(&b).unwrap().gpus[0].sm_procs, 4);
        // a version-1 reader checks the version first
        assert_ne!(u32_at(&b, 8), VERSION, "an older reader refuses the file");
        // without a share the file stays version 1 (every reader takes it)
        let plain = encode(&[g(1, 0, G)]).unwrap();
        assert_eq!(u32_at(&plain, 8), VERSION);
        assert_eq!(decode(&plain).unwrap().gpus[0].sm_procs, 0);
        // a version-1 file with a share (a host before the count): one process
        let mut old = b;
        old[8..12].copy_from_slice(&VERSION.to_le_bytes());
        old[HEADER_SIZE + E_SM_PROCS..HEADER_SIZE + E_SM_PROCS + 4].fill(0);
        assert_eq!(decode(&old).unwrap().gpus[0].sm_procs, 1);
        // counts that do not go with their share
        for (sm, procs) in [(25, 0), (25, 65), (0, 1)] {
            one.sm_percent = sm;
            one.sm_procs = procs;
            assert_eq!(
                encode(&[one]),
                Err(EncodeError::BadProcs(procs)),
                "{sm} {procs}"
            );
        }
        let mut bad = b;
        bad[HEADER_SIZE + E_SM_PROCS] = 0;
        assert!(decode(&bad).is_none(), "a share of no process");
        bad[HEADER_SIZE + E_SM_PROCS] = 65;
        assert!(
            decode(&bad).is_none(),
            "more processes than a share is split over"
        );
        let mut stray = plain;
        stray[HEADER_SIZE + E_SM_PROCS] = 2;
        stray[8..12].copy_from_slice(&VERSION_PROCS.to_le_bytes());
        assert!(decode(&stray).is_none(), "a count without a share");
    }

    /// A burst travels in a version-3 file, which older readers (versions
    /// 1 and 2 only) refuse; a bad burst is never written nor read.
    #[test]
    fn a_burst_travels_and_older_readers_refuse_it() {
        let mut one = g(1, 0, 10 * G);
        one.burst = Some(Burst {
            limit_bytes: 120 * G,
            priority: 100,
        });
        let b = encode(&[one, g(2, 1, G)]).unwrap();
        assert_eq!(u32_at(&b, 8), VERSION_BURST);
        let t = decode(&b).unwrap();
        assert_eq!(t.gpus(), &[one, g(2, 1, G)]);
        assert!(u32_at(&b, 8) > VERSION_PROCS, "an older reader refuses it");
        assert_eq!(u64_at(&b, reclaim_offset(0)), 0, "no supervisor yet");
        // limit below the guarantee, priority too high, burst beside a share
        for bad in [
            Burst {
                limit_bytes: 9 * G,
                priority: 0,
            },
            Burst {
                limit_bytes: 20 * G,
                priority: PRIORITY_MAX + 1,
            },
        ] {
            one.burst = Some(bad);
            assert_eq!(encode(&[one]), Err(EncodeError::BadBurst));
        }
        one.burst = Some(Burst {
            limit_bytes: 20 * G,
            priority: 0,
        });
        one.sm_percent = 25;
        one.sm_procs = 1;
        assert_eq!(encode(&[one]), Err(EncodeError::BadBurst));
        let mut low = b;
        low[HEADER_SIZE + E_LIMIT..HEADER_SIZE + E_LIMIT + 8].copy_from_slice(&G.to_le_bytes());
        assert!(decode(&low).is_none(), "a limit below the guarantee");
        // a version-1 file's bytes at the limit's place mean nothing
        let mut v1 = b;
        v1[8..12].copy_from_slice(&VERSION.to_le_bytes());
        assert_eq!(decode(&v1).unwrap().gpus[0].burst, None);
        assert_eq!(reclaim_wait_ms(u64::MAX), RECLAIM_WAIT_MAX_MS);
    }

    #[test]
    fn round_trip_and_live_offset() {
        let grant = [g(1, 0, 40 * G), g(2, 3, 70 * G)];
        let mut b = encode(&grant).unwrap();
        let t = decode(&b).unwrap();
        assert_eq!(t.gpus(), &grant);
        assert_eq!(t.position(&[2; 16]), Some(1));
        assert_eq!(t.position(&[9; 16]), None);
        // a store at the live offset is what the next reader sees, and
        // nothing else moves
        b[vram_offset(1)..vram_offset(1) + 8].copy_from_slice(&(8 * G).to_le_bytes());
        let t = decode(&b).unwrap();
        assert_eq!(t.gpus(), &[g(1, 0, 40 * G), g(2, 3, 8 * G)]);
        assert_eq!(decode(&encode(&[]).unwrap()).unwrap().n, 0);
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        let ok = encode(&[g(1, 0, G)]).unwrap();
        assert!(decode(&ok[..SIZE - 1]).is_none(), "short");
        let mut bad = ok;
        bad[0] ^= 1;
        assert!(decode(&bad).is_none(), "magic");
        let mut bad = ok;
        bad[8] = 4;
        assert!(decode(&bad).is_none(), "version");
        let mut bad = ok;
        bad[12] = (MAX_GPUS + 1) as u8;
        assert!(decode(&bad).is_none(), "count");
        assert_eq!(
            encode(&[g(1, 0, G), g(1, 1, G)]),
            Err(EncodeError::DuplicateGpu(1))
        );
        let mut dup = encode(&[g(1, 0, G), g(2, 1, G)]).unwrap();
        // entry 1's uuid becomes entry 0's
        dup[HEADER_SIZE + ENTRY_SIZE..HEADER_SIZE + ENTRY_SIZE + 16].copy_from_slice(&[1; 16]);
        assert!(decode(&dup).is_none(), "a GPU twice");
        assert_eq!(
            encode(&[g(0, 0, 0); MAX_GPUS + 1]),
            Err(EncodeError::TooManyGpus(MAX_GPUS + 1))
        );
    }

    #[test]
    fn text_uuids_become_raw() {
        let t = GpuGrant::memory("GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", 1, G);
        let r = t.raw().unwrap();
        assert_eq!(
            (r.uuid[0], r.uuid[15], r.index, r.vram_bytes),
            (0x0a, 0xf9, 1, G)
        );
        assert!(GpuGrant::memory("GPU-a", 0, 0).raw().is_none());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(t in proptest::collection::vec(proptest::prelude::any::<u8>(), SIZE..=SIZE)) {
            if let Some(t) = decode(&t) {
                proptest::prop_assert!(t.n <= MAX_GPUS);
            }
        }
    }
}
