/* The fake libcuda.so.1 (tests/fake/fake_cuda.c): managed memory
   (cuMemAllocManaged, cuMemAdvise, cuMemPrefetchAsync) and its eviction,
   as the real driver does it (docs/burst.md, "What the design rests on"):

   - an allocation holds no device memory until placed: a prefetch to a
     device (cuMemPrefetchAsync/_v2) makes its bytes resident there, counted
     in the device's in_use (so in cuMemGetInfo and NVML's device figure) but
     not in the process's procs[].used (NVML's per-process figure leaves
     managed memory out, as measured on the H200). A kernel's first touch is
     not modelled; FAKE_CUDA_MANAGED_RESIDENT=1 places each allocation whole
     on the current device at cuMemAllocManaged instead (as if touched at
     once). Residency is a byte count per allocation, not a page map: a
     prefetch of n bytes makes up to n more of its bytes resident.
   - an ordinary charge that does not fit (dev_charge: every ordinary path)
     and a prefetch that does not fit evict resident managed bytes of any
     process on that device to the host, earliest placed first (the open
     kernel module evicts its chunks by when they were allocated), until it
     fits. An allocation's bytes count as placed at its last prefetch to the
     device. What evicting every resident byte could not make fit is refused
     at once, moving nothing; FAKE_CUDA_HOST_BYTES caps the host's managed
     bytes: eviction stops there (the pages moved stay moved, as the driver
     moves chunk by chunk) and the charge fails with out of memory.
     FAKE_CUDA_EVICT_MS_PER_GIB delays the evicting call (default 0).
   - each victim allocation's share of an eviction is one record in the
     registry's ring (struct fake_evict), read by fake-registry-dump.
   - a prefetch back to the device brings evicted bytes back (evicting
     others when needed); a prefetch to the host (CU_DEVICE_CPU) moves them
     there; cuMemFree, the context's end and the process's end (reap_slot)
     release both.

   The allocations live in the registry (fake_shared.managed[]) so that any
   process can evict any other's; they change only under the managed lock:
   this process's mmu, then flock on the registry file (a forked child opens
   its own description of it: flock belongs to the open file, which fork
   shares). Lock order: mu, then the managed lock; never the reverse. */
#include "fake_cuda_internal.h"
#include <time.h>

static u64 g_host_limit;       /* FAKE_CUDA_HOST_BYTES, 0: no limit */
static u64 g_evict_ms_per_gib; /* FAKE_CUDA_EVICT_MS_PER_GIB */
static int g_place_at_alloc;   /* FAKE_CUDA_MANAGED_RESIDENT=1 */

void managed_env(void) {
  const char *e;
  g_host_limit = (e = getenv("FAKE_CUDA_HOST_BYTES")) ? strtoull(e, 0, 0) : 0;
  g_evict_ms_per_gib = (e = getenv("FAKE_CUDA_EVICT_MS_PER_GIB")) ? strtoull(e, 0, 0) : 0;
  g_place_at_alloc = (e = getenv("FAKE_CUDA_MANAGED_RESIDENT")) && !strcmp(e, "1");
}

#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ADD(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_SEQ_CST)
#define SUB(x, v) __atomic_fetch_sub(&(x), (v), __ATOMIC_SEQ_CST)

/* ------------------------------------------------------------ the lock */
static pthread_mutex_t mmu = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1, g_fd_pid; /* the registry file (-1: anonymous, this process only) */
void managed_keep_fd(int fd) { g_fd = fd; g_fd_pid = getpid(); }
void managed_lock(void) {
  pthread_mutex_lock(&mmu);
  if (g_fd < 0) return;
  if (g_fd_pid != getpid()) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", g_fd);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0) fd = fake_registry_open((void *)managed_lock);
    close(g_fd); /* the parent's description stays open (and locked, if it is) in the parent */
    g_fd = fd; g_fd_pid = getpid();
    if (fd < 0) return;
  }
  while (flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {}
}
void managed_unlock(void) {
  if (g_fd >= 0) flock(g_fd, LOCK_UN);
  pthread_mutex_unlock(&mmu);
}

/* ------------------------------------------------------------ the model (lock held) */
/* b of e's resident bytes leave its device */
static void unplace(struct fake_managed *e, u64 b) {
  e->resident -= b;
  SUB(S->in_use[e->dev], b);
  SUB(S->managed_resident[e->dev], b);
  if (e->slot >= 0) SUB(S->mprocs[e->slot].resident[e->dev], b);
}
static void host_add(struct fake_managed *e, u64 b) {
  e->host += b; ADD(S->managed_host, b);
  if (e->slot >= 0) ADD(S->mprocs[e->slot].host, b);
}
static void host_sub(struct fake_managed *e, u64 b) {
  e->host -= b; SUB(S->managed_host, b);
  if (e->slot >= 0) SUB(S->mprocs[e->slot].host, b);
}
static u64 host_room(void) {
  if (!g_host_limit) return ~0ull;
  u64 h = LD(S->managed_host);
  return h >= g_host_limit ? 0 : g_host_limit - h;
}
static void record(int slot, int dev, u64 b) {
  u64 k = LD(S->evictions);
  struct fake_evict *r = &S->evict[k % FAKE_EVICT_RING];
  r->victim_pid = slot >= 0 ? LD(S->procs[slot].pid) : 0;
  r->victim_pidns = slot >= 0 ? LD(S->procs[slot].pidns) : 0;
  r->evictor_pid = getpid();
  r->evictor_pidns = fake_pidns();
  r->dev = dev; r->pad = 0; r->bytes = b;
  ADD(S->evicted_bytes, b);
  __atomic_store_n(&S->evictions, k + 1, __ATOMIC_SEQ_CST);
}
/* move resident bytes on dev to the host, earliest placed first, skipping
   allocation `skip`, until `need` moved, none is left or the host is full;
   returns the bytes moved */
static u64 evict(int dev, u64 need, int skip) {
  u64 moved = 0;
  while (moved < need) {
    int v = -1;
    for (int i = 0; i < FAKE_MAX_MANAGED; i++) {
      struct fake_managed *e = &S->managed[i];
      if (i == skip || !e->live || e->dev != dev || !e->resident) continue;
      if (v < 0 || e->seq < S->managed[v].seq) v = i;
    }
    if (v < 0) break;
    struct fake_managed *e = &S->managed[v];
    u64 b = need - moved, room = host_room();
    if (b > e->resident) b = e->resident;
    if (b > room) b = room;
    if (!b) break;
    unplace(e, b);
    host_add(e, b);
    record(e->slot, dev, b);
    moved += b;
  }
  return moved;
}
static void peak_to(int dev, u64 now) {
  u64 pk = LD(S->peak[dev]);
  while (now > pk && !__atomic_compare_exchange_n(&S->peak[dev], &pk, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
}
/* add n to dev's in_use, evicting others' resident bytes (not allocation
   `skip`'s) while it does not fit; OK with *now the in_use after */
static int charge_evicting(int dev, u64 n, int skip, u64 *now, u64 *moved) {
  for (;;) {
    u64 ext = LD(S->external[dev]), mem = g_mem_of[dev];
    u64 v = __atomic_add_fetch(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
    if (v + ext <= mem) { *now = v; return OK; }
    SUB(S->in_use[dev], n);
    u64 evictable = LD(S->managed_resident[dev]) - (skip >= 0 && S->managed[skip].dev == dev ? S->managed[skip].resident : 0);
    if (v - evictable + ext > mem) return OOM; /* would not fit with all of it gone */
    u64 got = evict(dev, v + ext - mem, skip);
    if (!got) return OOM;
    *moved += got;
  }
}
static void evict_delay(u64 moved) {
  if (!moved || !g_evict_ms_per_gib) return;
  u64 ms = (u64)((double)moved * (double)g_evict_ms_per_gib / (double)(1ull << 30));
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* dev_charge's slow path: n did not fit on dev, where managed bytes are resident */
int managed_make_room(int dev, u64 n, u64 *now) {
  u64 moved = 0;
  managed_lock();
  int r = charge_evicting(dev, n, -1, now, &moved);
  managed_unlock();
  evict_delay(moved);
  return r;
}

/* up to `want` more bytes of allocation i resident on dev */
static int place(int i, int dev, u64 want, u64 *moved) {
  struct fake_managed *e = &S->managed[i];
  u64 carried = 0;
  if (e->dev != dev) { /* resident elsewhere: those bytes move here */
    if (e->dev >= 0 && e->resident) { carried = e->resident; unplace(e, carried); }
    e->dev = dev;
    want += carried;
  }
  u64 add = e->size - e->resident;
  if (add > want) add = want;
  if (!add) return OK;
  u64 now;
  if (charge_evicting(dev, add, i, &now, moved) != OK) {
    if (carried) host_add(e, carried); /* the moved bytes wait on the host */
    return OOM;
  }
  u64 back = add < e->host ? add : e->host;
  if (back) host_sub(e, back);
  e->resident += add;
  ADD(S->managed_resident[dev], add);
  if (e->slot >= 0) ADD(S->mprocs[e->slot].resident[dev], add);
  e->seq = __atomic_add_fetch(&S->managed_seq, 1, __ATOMIC_SEQ_CST);
  peak_to(dev, now);
  return OK;
}
/* up to `want` bytes of allocation i to the host: its resident ones first */
static int to_host(int i, u64 want) {
  struct fake_managed *e = &S->managed[i];
  u64 b = e->size - e->host;
  if (b > want) b = want;
  if (b > host_room()) return OOM;
  u64 r = b < e->resident ? b : e->resident;
  if (r) unplace(e, r);
  host_add(e, b);
  return OK;
}
static void release(struct fake_managed *e) {
  if (e->resident) unplace(e, e->resident);
  if (e->host) host_sub(e, e->host);
  e->live = 0;
}
/* cuMemFree or the context's end (drop_rec, mu held): only the owner's
   (a forked child's copy of its parent's record releases nothing) */
void managed_drop(int idx, u64 va) {
  if (idx < 0 || idx >= FAKE_MAX_MANAGED) return;
  int me = my_proc_pid == getpid() ? my_proc : -2;
  managed_lock();
  struct fake_managed *e = &S->managed[idx];
  if (e->live && e->va == va && e->slot == me) release(e);
  managed_unlock();
}
/* the process of slot i is gone (reap_slot) */
void managed_release_slot(int slot) {
  managed_lock();
  for (int i = 0; i < FAKE_MAX_MANAGED; i++)
    if (S->managed[i].live && S->managed[i].slot == slot) release(&S->managed[i]);
  managed_unlock();
}

/* ------------------------------------------------------------ entry points */
/* the index in managed[] of this process's allocation holding [p, p+n) (mu held); -1 none */
static int managed_of(CUdeviceptr p, size_t n) {
  for (size_t i = 0; i < nrec; i++) {
    struct rec *r = &recs[i];
    if (r->kind == K_MANAGED && p >= r->key && p < r->key + r->size && n <= r->key + r->size - p) return r->pool;
  }
  return -1;
}

CUresult i_cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) {
  if (f != 1 && f != 2) return INVALID_VALUE; /* CU_MEM_ATTACH_GLOBAL / _HOST */
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE; UNSAFE_CALL();
  reap_dead();
  pthread_mutex_lock(&mu);
  int slot = proc_slot(), dev = cur_dev;
  managed_lock();
  int i;
  for (i = 0; i < FAKE_MAX_MANAGED && S->managed[i].live; i++) {}
  if (i == FAKE_MAX_MANAGED) { managed_unlock(); pthread_mutex_unlock(&mu); return OOM; }
  u64 va = new_va(n);
  S->managed[i] = (struct fake_managed){1, slot, -1, -2, va, n, 0, 0, 0};
  u64 moved = 0;
  int r = g_place_at_alloc ? place(i, dev, n, &moved) : OK;
  if (r != OK) release(&S->managed[i]);
  managed_unlock();
  if (r == OK) {
    add_rec((struct rec){va, n, dev, K_MANAGED, cur_ctx(), i});
    ST.allocs++;
    ADD(S->allocs, 1);
    *p = va;
  } else {
    ADD(S->refused, 1);
  }
  pthread_mutex_unlock(&mu);
  evict_delay(moved);
  return r;
}

/* CU_MEM_ADVISE_*: 1..6; 3 SET_PREFERRED_LOCATION, 4 UNSET_PREFERRED_LOCATION
   (recorded, shown by fake-registry-dump; eviction ignores it, as the
   driver's does); the device may be CU_DEVICE_CPU (-1) */
CUresult i_cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice d) {
  CHECK_INIT(); if (!n || advice < 1 || advice > 6) return INVALID_VALUE;
  if (d != -1 && (d < 0 || d >= g_ndev)) return INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  int i = managed_of(p, n);
  if (i >= 0 && (advice == 3 || advice == 4)) {
    managed_lock();
    S->managed[i].pref = advice == 3 ? d : -2;
    managed_unlock();
  }
  pthread_mutex_unlock(&mu);
  return i >= 0 ? OK : INVALID_VALUE;
}
/* CUmemLocation: type 1 DEVICE (id), 2 HOST, 3 HOST_NUMA, 4 HOST_NUMA_CURRENT */
static int loc_dev(struct mem_loc l, int *d) {
  if (l.type == 1) { *d = l.id; return OK; }
  if (l.type >= 2 && l.type <= 4) { *d = -1; return OK; }
  return INVALID_VALUE;
}
CUresult i_cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, struct mem_loc loc) {
  int d; if (loc_dev(loc, &d) != OK) return INVALID_VALUE;
  return i_cuMemAdvise(p, n, advice, d);
}
CUresult i_cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s) {
  CHECK_INIT(); if (!n) return INVALID_VALUE;
  if (d != -1 && (d < 0 || d >= g_ndev)) return INVALID_DEVICE;
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  UNSAFE_CALL();
  reap_dead();
  pthread_mutex_lock(&mu);
  int i = managed_of(p, n);
  if (i < 0) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  u64 moved = 0;
  managed_lock();
  int r = d >= 0 ? place(i, d, n, &moved) : to_host(i, n);
  managed_unlock();
  pthread_mutex_unlock(&mu);
  evict_delay(moved);
  return r;
}
CUresult i_cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, struct mem_loc loc, unsigned flags, CUstream s) {
  int d; if (flags || loc_dev(loc, &d) != OK) return INVALID_VALUE;
  return i_cuMemPrefetchAsync(p, n, d, s);
}
