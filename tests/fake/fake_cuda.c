/* A fake libcuda.so.1 for the interceptor tests: N devices of a fixed size
   (FAKE_CUDA_DEVICES, FAKE_CUDA_MEM_BYTES), real bookkeeping of allocations,
   cuGetProcAddress/_v2 over its own symbols (version + ptsz aware), and a
   cross-process in-use/peak record in FAKE_CUDA_PEAK_FILE.
   FAKE_CUDA_GPA_MODE=internal makes cuGetProcAddress return internal
   function pointers that differ from the exported symbols (like a driver
   that hands out non-exported entry points). Built with
   -Bsymbolic-functions so that its own symbol addresses are its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fake_cuda.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long u64;

#define FAKE_MAX_PITCH 2147483647ull
enum { OK = 0, INVALID_VALUE = 1, OOM = 2, NOT_INIT = 3, INVALID_DEVICE = 101,
       INVALID_CONTEXT = 201, NOT_FOUND = 500 };

static int g_ndev = 1;
static u64 g_mem = 1ull << 30;
static int g_internal_gpa = 0;
static struct fake_shared *S;
static struct fake_stats ST;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int g_inited;
static int my_proc = -1, my_proc_pid = 0;

/* ------------------------------------------------------------ init */
__attribute__((constructor)) static void fake_ctor(void) {
  const char *e = getenv("FAKE_CUDA_GPA_MODE");
  if (e && !strcmp(e, "internal")) g_internal_gpa = 1;
}
static void fake_init(void) {
  if (g_inited) return;
  const char *e;
  if ((e = getenv("FAKE_CUDA_DEVICES"))) g_ndev = atoi(e);
  if (g_ndev < 1) g_ndev = 1;
  if (g_ndev > FAKE_MAX_DEV) g_ndev = FAKE_MAX_DEV;
  if ((e = getenv("FAKE_CUDA_MEM_BYTES"))) g_mem = strtoull(e, 0, 0);
  if ((e = getenv("FAKE_CUDA_GPA_MODE")) && !strcmp(e, "internal")) g_internal_gpa = 1;
  const char *pf = getenv("FAKE_CUDA_PEAK_FILE");
  void *m = MAP_FAILED;
  if (pf && *pf) {
    int fd = open(pf, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) {
      flock(fd, LOCK_EX);
      off_t sz = lseek(fd, 0, SEEK_END);
      if (sz < (off_t)sizeof(struct fake_shared)) ftruncate(fd, sizeof(struct fake_shared));
      m = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED && ((struct fake_shared *)m)->magic != FAKE_SHARED_MAGIC)
        ((struct fake_shared *)m)->magic = FAKE_SHARED_MAGIC;
      flock(fd, LOCK_UN);
      close(fd);
    }
  }
  if (m == MAP_FAILED)
    m = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  S = m;
  g_inited = 1;
  /* an earlier image of this process (it exec'd) closed its device files:
     its memory is gone */
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int pid = getpid();
    if (!__atomic_compare_exchange_n(&S->procs[i].pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
    for (int d = 0; d < FAKE_MAX_DEV; d++) {
      u64 u = __atomic_exchange_n(&S->procs[i].used[d], 0, __ATOMIC_SEQ_CST);
      __atomic_fetch_sub(&S->in_use[d], u, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&S->procs[i].pid, 0, __ATOMIC_SEQ_CST);
  }
}

/* a process that exited holds no device memory, even before it is reaped
   (the driver frees it when the process closes its device files) */
static int proc_gone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[512]; snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC); if (fd < 0) return 0; /* cannot tell: alive */
  ssize_t n = read(fd, buf, sizeof buf - 1); close(fd); if (n <= 0) return 0; buf[n] = 0;
  char *p = strrchr(buf, ')'); return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}
/* reclaim the shared records of dead processes (their memory is gone) */
static void reap_dead(void) {
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int pid = __atomic_load_n(&S->procs[i].pid, __ATOMIC_SEQ_CST);
    if (pid == 0 || pid == getpid()) continue;
    if (!proc_gone(pid)) continue;
    if (!__atomic_compare_exchange_n(&S->procs[i].pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
    for (int d = 0; d < FAKE_MAX_DEV; d++) {
      u64 u = __atomic_exchange_n(&S->procs[i].used[d], 0, __ATOMIC_SEQ_CST);
      __atomic_fetch_sub(&S->in_use[d], u, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&S->procs[i].pid, 0, __ATOMIC_SEQ_CST);
  }
}

static int proc_slot(void) {
  if (my_proc >= 0 && my_proc_pid == getpid()) return my_proc;
  int me = getpid();
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int z = 0;
    if (__atomic_compare_exchange_n(&S->procs[i].pid, &z, me, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      my_proc = i; my_proc_pid = me;
      return i;
    }
  }
  return -1;
}

/* ------------------------------------------------------------ bookkeeping */
/* The lifetimes follow the real driver's (docs/interceptor.md, "fake driver"):
   - contexts own their allocations (cuMemAlloc*, pitch, managed, arrays);
     cuCtxDestroy, cuDevicePrimaryCtxReset and the last primary release free
     them; each context costs FAKE_CUDA_CTX_BYTES of device memory;
   - a VMM physical allocation lives while its handle has references
     (create, retain, import) or any mapping of it exists;
   - stream-ordered pools (a default one per device, cuMemPoolCreate ones)
     reserve memory in FAKE_CUDA_POOL_GRAN steps and keep freed memory up to
     their release threshold until a synchronisation or cuMemPoolTrimTo;
   - streams belong to a context (and so to a device);
   - device memory in use (in_use[], peak[]) counts all of that, per device,
     across the processes sharing FAKE_CUDA_PEAK_FILE. */
enum { K_PTR = 1, K_ARRAY = 3, K_MIPMAP = 4, K_POOL = 8, K_GRAPH = 9 }; /* K_GRAPH: a graph allocation left live by a launch (pool = its exec) */
struct rec { u64 key; u64 size; int dev; int kind; int ctx; int pool; };
static struct rec *recs; static size_t nrec, caprec;
static u64 next_ptr = 0x7f0000000000ull, next_ptr32 = 0x10000000ull, next_handle = 0x50000000ull;
static u64 g_ctx_bytes, g_pool_gran = 2u << 20, g_pitch_align = 2048;
static int g_fail_next_free;

#define MAXCTX 64
struct ctx { int live, dev, primary, refs; u64 heap, stack; };
#define FAKE_SMS 4
#define FAKE_THREADS_PER_SM 64
static struct ctx ctxs[MAXCTX];
static int primary_of[FAKE_MAX_DEV] = {-1, -1, -1, -1, -1, -1, -1, -1};
static __thread int ctx_stack[16]; static __thread int ctx_top = -1; /* index into ctxs, -1 none */

/* charge n bytes on dev; OOM when the device is full */
static int dev_charge(int dev, u64 n) {
  reap_dead();
  int p = proc_slot();
  u64 now = __atomic_add_fetch(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
  if (now + __atomic_load_n(&S->external[dev], __ATOMIC_SEQ_CST) > g_mem) {
    __atomic_fetch_sub(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&S->refused, 1, __ATOMIC_SEQ_CST);
    return OOM;
  }
  if (p >= 0) __atomic_fetch_add(&S->procs[p].used[dev], n, __ATOMIC_SEQ_CST);
  u64 pk = __atomic_load_n(&S->peak[dev], __ATOMIC_SEQ_CST);
  while (now > pk && !__atomic_compare_exchange_n(&S->peak[dev], &pk, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  __atomic_fetch_add(&S->allocs, 1, __ATOMIC_SEQ_CST);
  return OK;
}
static void dev_uncharge(int dev, u64 n) {
  int p = proc_slot();
  if (p >= 0) __atomic_fetch_sub(&S->procs[p].used[dev], n, __ATOMIC_SEQ_CST);
  __atomic_fetch_sub(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&S->frees, 1, __ATOMIC_SEQ_CST);
}

static int cur_ctx(void) { return ctx_top >= 0 ? ctx_stack[ctx_top] : -1; }
static int cur_dev_of(void) { int c = cur_ctx(); return c >= 0 && ctxs[c].live ? ctxs[c].dev : -1; }
#define cur_dev (cur_dev_of())

static u64 new_va(u64 size) { u64 k = next_ptr; next_ptr += ((size + 0xfffff) & ~0xfffffull) + 0x100000; return k; }

static void add_rec(struct rec r) {
  if (nrec == caprec) { caprec = caprec ? caprec * 2 : 1024; recs = realloc(recs, caprec * sizeof *recs); }
  recs[nrec++] = r;
}

static int track(int kind, int dev, u64 size, u64 *out, int narrow) {
  pthread_mutex_lock(&mu);
  int r = dev_charge(dev, size);
  if (r == OK) {
    u64 key;
    if (narrow) { key = next_ptr32; next_ptr32 += (size + 4095) & ~4095ull; if (!size) next_ptr32 += 4096; }
    else key = new_va(size);
    add_rec((struct rec){key, size, dev, kind, cur_ctx(), -1});
    ST.allocs++;
    *out = key;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static void unknown_free(u64 key) {
  ST.unknown_frees++;
  ST.last_unknown_free = key;
  __atomic_fetch_add(&S->unknown_frees, 1, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------ pools */
#define MAXPOOL 32
struct pool { int live, dev, destroyed; u64 reserved, used, threshold; };
static struct pool pools[MAXPOOL];
static int cur_pool[FAKE_MAX_DEV] = {-1, -1, -1, -1, -1, -1, -1, -1};
static int def_pool[FAKE_MAX_DEV] = {-1, -1, -1, -1, -1, -1, -1, -1};
#define POOL_H(i) ((void *)(0x900000ull + 0x100ull * (u64)(i)))
static int pool_idx(void *h) { u64 v = (u64)h; if (v < 0x900000ull || (v - 0x900000ull) % 0x100) return -1; u64 i = (v - 0x900000ull) / 0x100; return i < MAXPOOL && pools[i].live ? (int)i : -1; }
static int pool_new(int dev) { for (int i = 0; i < MAXPOOL; i++) if (!pools[i].live) { pools[i] = (struct pool){1, dev, 0, 0, 0, 0}; return i; } return -1; }
static int default_pool(int dev) { if (def_pool[dev] < 0) def_pool[dev] = pool_new(dev); if (cur_pool[dev] < 0) cur_pool[dev] = def_pool[dev]; return def_pool[dev]; }
static u64 gran_up(u64 n) { return (n + g_pool_gran - 1) / g_pool_gran * g_pool_gran; }
/* give back reserved memory above max(used, keep) (mu held) */
static void pool_shrink(struct pool *p, u64 keep) {
  u64 target = p->used > keep ? p->used : keep;
  if (target >= p->reserved) return;
  target = gran_up(target);
  if (p->reserved > target) { dev_uncharge(p->dev, p->reserved - target); p->reserved = target; }
}
static void pools_sync(void) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXPOOL; i++) if (pools[i].live) pool_shrink(&pools[i], pools[i].threshold);
  pthread_mutex_unlock(&mu);
}
static int pool_alloc(int pi, u64 n, u64 *out) {
  int r = OK;
  pthread_mutex_lock(&mu);
  struct pool *p = &pools[pi];
  if (p->reserved - p->used < n) {
    u64 grow = gran_up(n - (p->reserved - p->used));
    r = dev_charge(p->dev, grow);
    if (r == OK) p->reserved += grow;
  }
  if (r == OK) {
    p->used += n;
    u64 k = new_va(n);
    add_rec((struct rec){k, n, p->dev, K_POOL, cur_ctx(), pi});
    ST.allocs++;
    *out = k;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static void graph_freed(int dev, u64 size, int exec, u64 va);
/* free a record (mu held) */
static void drop_rec(size_t i) {
  struct rec *r = &recs[i];
  if (r->kind == K_GRAPH) {
    graph_freed(r->dev, r->size, r->pool, r->key); /* back to the graph pool's reserve */
  } else if (r->kind == K_POOL) {
    struct pool *p = &pools[r->pool];
    p->used -= r->size;
    if (p->destroyed) pool_shrink(p, 0);
    if (p->destroyed && p->used == 0) p->live = 0;
  } else {
    dev_uncharge(r->dev, r->size);
  }
  recs[i] = recs[--nrec];
  ST.frees++;
}

static int untrack(int kind, u64 key) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec; i++) {
    if (recs[i].key == key && (recs[i].kind == kind || (kind == K_PTR && (recs[i].kind == K_POOL || recs[i].kind == K_GRAPH)))) {
      if (g_fail_next_free) { g_fail_next_free = 0; pthread_mutex_unlock(&mu); return 700; /* ILLEGAL_ADDRESS */ }
      drop_rec(i);
      pthread_mutex_unlock(&mu);
      return OK;
    }
  }
  unknown_free(key);
  pthread_mutex_unlock(&mu);
  return INVALID_VALUE;
}

static int need_ctx(void) { return cur_dev < 0 ? INVALID_CONTEXT : OK; }

/* ------------------------------------------------------------ contexts */
static int ctx_new(int dev, int primary) {
  pthread_mutex_lock(&mu);
  int i;
  for (i = 0; i < MAXCTX && ctxs[i].live; i++) {}
  if (i == MAXCTX) { pthread_mutex_unlock(&mu); return -OOM; }
  if (g_ctx_bytes && dev_charge(dev, g_ctx_bytes) != OK) { pthread_mutex_unlock(&mu); return -OOM; }
  ctxs[i] = (struct ctx){1, dev, primary, 1, 0, 0};
  ST.contexts_live++;
  pthread_mutex_unlock(&mu);
  return i;
}
/* destroy: every allocation of the context goes (pool memory stays with its pool) */
static void ctx_kill(int c) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec;) {
    if (recs[i].ctx == c && recs[i].kind != K_POOL) drop_rec(i); else i++;
  }
  if (ctxs[c].heap) dev_uncharge(ctxs[c].dev, ctxs[c].heap);
  if (ctxs[c].stack) dev_uncharge(ctxs[c].dev, ctxs[c].stack);
  if (g_ctx_bytes) dev_uncharge(ctxs[c].dev, g_ctx_bytes);
  if (ctxs[c].primary) primary_of[ctxs[c].dev] = -1;
  ctxs[c].live = 0;
  ST.contexts_live--;
  pthread_mutex_unlock(&mu);
}
#define CTX_H(i) ((CUcontext)(0x300000ull + 0x40ull * (u64)(i)))
static int ctx_idx(CUcontext h) { u64 v = (u64)h; if (v < 0x300000ull || (v - 0x300000ull) % 0x40) return -1; u64 i = (v - 0x300000ull) / 0x40; return i < MAXCTX ? (int)i : -1; }
static void set_current(int c) { if (ctx_top < 0) ctx_top = 0; ctx_stack[ctx_top] = c; }

/* ------------------------------------------------------------ streams */
#define MAXSTREAM 64
static int stream_ctx[MAXSTREAM]; static int stream_live[MAXSTREAM];
#define STREAM_H(i) ((CUstream)(0x700000ull + 0x40ull * (u64)(i)))
static int stream_idx(CUstream h) { u64 v = (u64)h; if (v < 0x700000ull || (v - 0x700000ull) % 0x40) return -1; u64 i = (v - 0x700000ull) / 0x40; return i < MAXSTREAM && stream_live[i] ? (int)i : -1; }
/* device of a stream: its context's; NULL/legacy/per-thread: the current one */
static int stream_dev(CUstream s) {
  if ((u64)s <= 2) return cur_dev;
  int i = stream_idx(s);
  if (i < 0 || !ctxs[stream_ctx[i]].live) return -1;
  return ctxs[stream_ctx[i]].dev;
}


/* ------------------------------------------------------------ stream capture */
/* Modelled on the driver's documented rules (cuStreamBeginCapture,
   CUstreamCaptureMode): a thread whose interaction mode is GLOBAL is
   prohibited from "potentially unsafe" calls while it has a non-relaxed
   capture of its own or any other thread has a GLOBAL one; THREAD_LOCAL:
   only its own; RELAXED: never. A prohibited call fails with
   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that
   prohibit it; cuStreamEndCapture of an invalidated capture then fails with
   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. Which calls are unsafe the
   documentation does not list: the fake takes the strict side (allocation,
   free, memory-info, synchronising, pool-attribute, pool-trim, graph-memory
   attribute and trim calls); synchronising the capturing stream or using
   the legacy stream during a capture invalidates it too. Stream-ordered
   allocations and frees on a capturing stream become graph memory nodes:
   no memory until the graph is launched. */
enum { CAP_GLOBAL = 0, CAP_THREAD_LOCAL = 1, CAP_RELAXED = 2 };
enum { E_CAP_UNSUPPORTED = 900, E_CAP_INVALIDATED = 901, E_CAP_IMPLICIT = 906, E_CAP_WRONG_THREAD = 908, E_ILLEGAL_STATE = 401 };
struct cap { int active, mode, invalid, graph; pthread_t owner; unsigned long long id; };
static struct cap caps[64];
static int n_caps_global;            /* active GLOBAL-mode captures, all threads */
static __thread int t_caps_own;      /* this thread's active non-relaxed captures */
static __thread int t_caps_own_global;
static __thread int t_mode;          /* CAP_GLOBAL (0) by default */
static unsigned long long cap_next_id = 1;
static u64 capture_violations;       /* prohibited calls seen (test hook) */
static int prohibited(void) {
  if (t_mode == CAP_RELAXED) return 0;
  if (t_caps_own > 0) return 1;
  return t_mode == CAP_GLOBAL && __atomic_load_n(&n_caps_global, __ATOMIC_SEQ_CST) - t_caps_own_global > 0;
}
static void cap_invalidate_prohibiting(void) {
  pthread_t me = pthread_self();
  for (int i = 0; i < 64; i++)
    if (caps[i].active && caps[i].mode != CAP_RELAXED && (caps[i].mode == CAP_GLOBAL || pthread_equal(caps[i].owner, me)))
      caps[i].invalid = 1;
}
/* an unsafe call: refused (and the capture broken) while prohibited */
#define UNSAFE_CALL() do { if (prohibited()) { cap_invalidate_prohibiting(); __atomic_fetch_add(&capture_violations, 1, __ATOMIC_SEQ_CST); return E_CAP_UNSUPPORTED; } } while (0)

/* graphs: a graph holds memory-node allocations (alloc nodes, captured
   stream-ordered allocations) and notes those it frees itself (free nodes).
   At launch the device's graph memory pool reserves what the graph needs on
   top of what earlier launches left allocated; the allocations the graph
   does not free stay allocated (cuMemFree/cuMemFreeAsync outside frees them)
   and the reserve stays until cuDeviceGraphMemTrim gives back what no
   allocation uses. A graph whose allocations are still live cannot be
   launched again (CUDA_ERROR_INVALID_VALUE). */
#define MAXGRAPH 64
#define MAXGALLOC 32
struct galloc { u64 va, size; int freed; };
struct graph { int live, dev, n; struct galloc a[MAXGALLOC]; };
struct gexec { int live, dev, n, outstanding; struct galloc a[MAXGALLOC]; };
static struct graph graphs[MAXGRAPH];
static struct gexec gexecs[MAXGRAPH];
static u64 graph_reserve[FAKE_MAX_DEV], graph_used[FAKE_MAX_DEV], graph_used_high[FAKE_MAX_DEV], graph_reserve_high[FAKE_MAX_DEV];
#define GRAPH_H(i) ((void *)(0xa00000ull + 0x40ull * (u64)(i)))
#define EXEC_H(i) ((void *)(0xb00000ull + 0x40ull * (u64)(i)))
static int h_idx(void *h, u64 base, int max) { u64 v = (u64)h; if (v < base || (v - base) % 0x40) return -1; u64 i = (v - base) / 0x40; return i < (u64)max ? (int)i : -1; }
static int graph_new(int dev) { for (int i = 0; i < MAXGRAPH; i++) if (!graphs[i].live) { graphs[i] = (struct graph){1, dev, 0, {{0}}}; return i; } return -1; }
/* a memory node of n bytes in graph gi (mu held): its virtual address */
static int graph_add_alloc(int gi, u64 n, u64 *va) {
  struct graph *g = &graphs[gi];
  if (g->n == MAXGALLOC) return OOM;
  u64 k = new_va(n);
  g->a[g->n++] = (struct galloc){k, (n + g_pool_gran - 1) / g_pool_gran * g_pool_gran, 0};
  *va = k; return OK;
}
/* a free node in graph gi of va (mu held): the graph's own allocation */
static int graph_add_free(int gi, u64 va) {
  struct graph *g = &graphs[gi];
  for (int j = 0; j < g->n; j++) if (g->a[j].va == va && !g->a[j].freed) { g->a[j].freed = 1; return OK; }
  return INVALID_VALUE;
}
/* the capture of a stream, if any (-1) */
static int cap_of(CUstream s) {
  if ((u64)s <= 2) return -1;
  u64 v = (u64)s; if (v < 0x700000ull || (v - 0x700000ull) % 0x40) return -1;
  u64 i = (v - 0x700000ull) / 0x40; return i < 64 && caps[i].active ? (int)i : -1;
}
/* legacy-stream work while a capture that it would join is active */
static int legacy_conflict(CUstream s) {
  if ((u64)s > 1) return 0;
  if (t_mode == CAP_RELAXED) return 0;
  for (int i = 0; i < 64; i++) if (caps[i].active && caps[i].mode != CAP_RELAXED) return 1;
  return 0;
}

/* ------------------------------------------------------------ VMM */
#define MAXPHYS 4096
struct phys { int live, dev, refs, maps; u64 size; u64 handle; };
static struct phys phys[MAXPHYS];
struct map { u64 va, size; int ph; unsigned access[FAKE_MAX_DEV]; }; /* access: CU_MEM_ACCESS_FLAGS per device */
static struct map maps[MAXPHYS]; static int nmaps;
static int phys_of(u64 h) { for (int i = 0; i < MAXPHYS; i++) if (phys[i].live && phys[i].handle == h && phys[i].refs > 0) return i; return -1; }
static void phys_maybe_free(int i) {
  if (phys[i].refs == 0 && phys[i].maps == 0) {
    if (phys[i].dev >= 0) dev_uncharge(phys[i].dev, phys[i].size);
    phys[i].live = 0;
    ST.vmm_phys_live--;
  }
}

/* ------------------------------------------------------------ implementations */
#define CHECK_INIT() do { if (!g_inited) return NOT_INIT; } while (0)

static void fake_env(void) {
  const char *e;
  if ((e = getenv("FAKE_CUDA_CTX_BYTES"))) g_ctx_bytes = strtoull(e, 0, 0);
  if ((e = getenv("FAKE_CUDA_POOL_GRAN")) && strtoull(e, 0, 0)) g_pool_gran = strtoull(e, 0, 0);
  if ((e = getenv("FAKE_CUDA_PITCH_ALIGN")) && strtoull(e, 0, 0)) g_pitch_align = strtoull(e, 0, 0);
  /* VMM handle values: a driver may hand out any 64-bit value */
  if ((e = getenv("FAKE_CUDA_HANDLE_BASE")) && next_handle == 0x50000000ull) next_handle = strtoull(e, 0, 0);
}
static CUresult i_cuInit(unsigned f) { (void)f; fake_init(); fake_env(); return OK; }
static CUresult i_cuDriverGetVersion(int *v) { if (!v) return INVALID_VALUE; *v = 13000; return OK; }
static CUresult i_cuDeviceGetCount(int *n) { CHECK_INIT(); if (!n) return INVALID_VALUE; *n = g_ndev; return OK; }
static CUresult i_cuDeviceGet(CUdevice *d, int o) { CHECK_INIT(); if (!d) return INVALID_VALUE; if (o < 0 || o >= g_ndev) return INVALID_DEVICE; *d = o; return OK; }
static void uuid_of(int dev, unsigned char u[16]) { for (int i = 0; i < 16; i++) u[i] = 0x11 * (i % 15 + 1); u[0] = 0xfa; u[1] = 0xce; u[15] = (unsigned char)dev; }
static CUresult i_cuDeviceGetUuid(unsigned char *u, CUdevice d) { CHECK_INIT(); if (!u) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; uuid_of(d, u); return OK; }
static CUresult i_cuDeviceTotalMem_v2(size_t *b, CUdevice d) { CHECK_INIT(); if (!b) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; *b = g_mem; return OK; }
static CUresult i_cuDeviceTotalMem(unsigned *b, CUdevice d) { ST.calls_legacy++; size_t t; CUresult r = i_cuDeviceTotalMem_v2(b ? &t : 0, d); if (r == OK) *b = t > 0xffffffffu ? 0xffffffffu : (unsigned)t; return r; }
static CUresult i_cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d) {
  (void)f; CHECK_INIT(); if (!c) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = ctx_new(d, 0); if (i < 0) return -i;
  if (ctx_top < 15) ctx_stack[++ctx_top] = i; /* pushed as current */
  *c = CTX_H(i); return OK;
}
static CUresult i_cuCtxCreate(CUcontext *c, unsigned f, CUdevice d) { ST.calls_legacy++; return i_cuCtxCreate_v2(c, f, d); }
static CUresult i_cuCtxCreate_v3(CUcontext *c, void *p, int n, unsigned f, CUdevice d) { (void)p; (void)n; return i_cuCtxCreate_v2(c, f, d); }
static CUresult i_cuCtxCreate_v4(CUcontext *c, void *p, unsigned f, CUdevice d) { (void)p; return i_cuCtxCreate_v2(c, f, d); }
static CUresult i_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  CHECK_INIT(); if (!c) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = primary_of[d];
  if (i >= 0) { pthread_mutex_lock(&mu); ctxs[i].refs++; pthread_mutex_unlock(&mu); }
  else { i = ctx_new(d, 1); if (i < 0) return -i; primary_of[d] = i; }
  *c = CTX_H(i); return OK;
}
static CUresult i_cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = primary_of[d]; if (i < 0) return INVALID_CONTEXT;
  if (--ctxs[i].refs == 0) ctx_kill(i);
  return OK;
}
static CUresult i_cuDevicePrimaryCtxRelease(CUdevice d) { ST.calls_legacy++; return i_cuDevicePrimaryCtxRelease_v2(d); }
static CUresult i_cuDevicePrimaryCtxReset_v2(CUdevice d) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = primary_of[d]; if (i >= 0) ctx_kill(i);
  return OK;
}
static CUresult i_cuDevicePrimaryCtxReset(CUdevice d) { ST.calls_legacy++; return i_cuDevicePrimaryCtxReset_v2(d); }
static CUresult i_cuDevicePrimaryCtxGetState(CUdevice d, unsigned *fl, int *active) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE; if (!fl || !active) return INVALID_VALUE;
  *fl = 0; *active = primary_of[d] >= 0; return OK;
}
static CUresult i_cuCtxDestroy_v2(CUcontext c) {
  CHECK_INIT(); int i = ctx_idx(c); if (i < 0 || !ctxs[i].live) return INVALID_CONTEXT;
  ctx_kill(i);
  for (int k = 0; k <= ctx_top; k++) if (ctx_stack[k] == i) ctx_stack[k] = -1;
  return OK;
}
static CUresult i_cuCtxDestroy(CUcontext c) { ST.calls_legacy++; return i_cuCtxDestroy_v2(c); }
static CUresult i_cuCtxSetCurrent(CUcontext c) {
  CHECK_INIT();
  if (!c) { if (ctx_top >= 0) ctx_stack[ctx_top] = -1; return OK; }
  int i = ctx_idx(c); if (i < 0 || !ctxs[i].live) return INVALID_CONTEXT;
  set_current(i); return OK;
}
static CUresult i_cuCtxGetCurrent(CUcontext *c) { CHECK_INIT(); if (!c) return INVALID_VALUE; int i = cur_ctx(); *c = i >= 0 ? CTX_H(i) : 0; return OK; }
static CUresult i_cuCtxPushCurrent_v2(CUcontext c) { CHECK_INIT(); int i = ctx_idx(c); if (i < 0 || !ctxs[i].live) return INVALID_CONTEXT; if (ctx_top >= 15) return INVALID_VALUE; ctx_stack[++ctx_top] = i; return OK; }
static CUresult i_cuCtxPopCurrent_v2(CUcontext *c) { CHECK_INIT(); if (ctx_top < 0) return INVALID_CONTEXT; int i = ctx_stack[ctx_top--]; if (c) *c = i >= 0 ? CTX_H(i) : 0; return OK; }
static CUresult i_cuCtxGetDevice(CUdevice *d) { CHECK_INIT(); if (!d) return INVALID_VALUE; if (cur_dev < 0) return INVALID_CONTEXT; *d = cur_dev; return OK; }
static CUresult i_cuCtxSynchronize(void) { CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; UNSAFE_CALL(); pools_sync(); return OK; }
static CUresult i_cuCtxSetLimit(int lim, size_t v) {
  CHECK_INIT(); int c = cur_ctx(); if (c < 0 || !ctxs[c].live) return INVALID_CONTEXT;
  if (lim != 2 && lim != 0) return OK;
  /* heap: above the 8 MiB default; stack: local memory for every resident thread */
  u64 *cur = lim == 2 ? &ctxs[c].heap : &ctxs[c].stack;
  u64 want = lim == 2 ? (v > (8u << 20) ? v - (8u << 20) : 0) : (v > 1024 ? (v - 1024) * FAKE_SMS * FAKE_THREADS_PER_SM : 0);
  pthread_mutex_lock(&mu);
  int r = OK;
  if (want > *cur) { r = dev_charge(ctxs[c].dev, want - *cur); if (r == OK) *cur = want; }
  else { dev_uncharge(ctxs[c].dev, *cur - want); *cur = want; }
  pthread_mutex_unlock(&mu);
  return r;
}
static CUresult i_cuCtxGetLimit(size_t *v, int lim) { CHECK_INIT(); int c = cur_ctx(); if (!v) return INVALID_VALUE; if (c < 0) return INVALID_CONTEXT; *v = lim == 2 ? ctxs[c].heap + (8u << 20) : lim == 0 ? ctxs[c].stack / (FAKE_SMS * FAKE_THREADS_PER_SM) + 1024 : 0; return OK; }
static CUresult i_cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  CHECK_INIT(); if (!v) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  if (attr == 16) { *v = FAKE_SMS; return OK; }
  if (attr == 39) { *v = FAKE_THREADS_PER_SM; return OK; }
  if (attr == 11) { *v = (int)FAKE_MAX_PITCH; return OK; } /* MAX_PITCH */
  *v = 0; return OK;
}

static CUresult i_cuStreamCreate(CUstream *s, unsigned f) {
  (void)f; CHECK_INIT(); if (!s) return INVALID_VALUE; int c = cur_ctx(); if (c < 0 || !ctxs[c].live) return INVALID_CONTEXT;
  for (int i = 0; i < MAXSTREAM; i++) if (!stream_live[i]) { stream_live[i] = 1; stream_ctx[i] = c; *s = STREAM_H(i); return OK; }
  return OOM;
}
static CUresult i_cuStreamDestroy_v2(CUstream s) { CHECK_INIT(); int i = stream_idx(s); if (i < 0) return INVALID_VALUE; stream_live[i] = 0; return OK; }
static CUresult i_cuStreamGetCtx(CUstream s, CUcontext *c) {
  CHECK_INIT(); if (!c) return INVALID_VALUE;
  if ((u64)s <= 2) { int i = cur_ctx(); if (i < 0) return INVALID_CONTEXT; *c = CTX_H(i); return OK; }
  int i = stream_idx(s); if (i < 0) return INVALID_VALUE; *c = CTX_H(stream_ctx[i]); return OK;
}
static CUresult i_cuStreamSynchronize(CUstream s) {
  CHECK_INIT(); if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  int ci = cap_of(s);
  if (ci >= 0) { caps[ci].invalid = 1; __atomic_fetch_add(&capture_violations, 1, __ATOMIC_SEQ_CST); return E_CAP_UNSUPPORTED; }
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); __atomic_fetch_add(&capture_violations, 1, __ATOMIC_SEQ_CST); return E_CAP_IMPLICIT; }
  UNSAFE_CALL(); pools_sync(); return OK;
}
static CUresult i_cuStreamSynchronize_ptsz(CUstream s) { ST.calls_ptsz++; return i_cuStreamSynchronize(s); }
static CUresult i_cuEventSynchronize(void *e) { CHECK_INIT(); (void)e; UNSAFE_CALL(); pools_sync(); return OK; }

static CUresult i_cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
  CHECK_INIT(); if (!data) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec; i++) {
    struct rec *r = &recs[i];
    if ((r->kind == K_PTR || r->kind == K_POOL) && p >= r->key && p < r->key + (r->size ? r->size : 1)) {
      u64 start = r->key; int dev = r->dev;
      pthread_mutex_unlock(&mu);
      if (attr == 11) { *(u64 *)data = start; return OK; }      /* RANGE_START_ADDR */
      if (attr == 9) { *(int *)data = dev; return OK; }          /* DEVICE_ORDINAL */
      return INVALID_VALUE;
    }
  }
  pthread_mutex_unlock(&mu);
  return INVALID_VALUE;
}

static CUresult i_cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE; UNSAFE_CALL();
  u64 k; int r = track(K_PTR, cur_dev, n, &k, 0); if (r == OK) *p = k; return r;
}
static CUresult i_cuMemAlloc(unsigned *p, unsigned n) {
  ST.calls_legacy++;
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE; UNSAFE_CALL();
  u64 k; int r = track(K_PTR, cur_dev, n, &k, 1); if (r == OK) *p = (unsigned)k; return r;
}
/* CU_DEVICE_ATTRIBUTE_MAX_PITCH (11): wider rows are invalid, as are
   sizes that do not fit in 64 bits (the driver's answer to both:
   CUDA_ERROR_INVALID_VALUE) */
static CUresult i_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !pitch || !w || !h || (e != 4 && e != 8 && e != 16)) return INVALID_VALUE;
  if (w > FAKE_MAX_PITCH) return INVALID_VALUE;
  UNSAFE_CALL();
  size_t pt = (w + g_pitch_align - 1) / g_pitch_align * g_pitch_align; u64 bytes;
  if (__builtin_mul_overflow((u64)pt, (u64)h, &bytes)) return INVALID_VALUE;
  u64 k; int r = track(K_PTR, cur_dev, bytes, &k, 0);
  if (r == OK) { *p = k; *pitch = pt; } return r;
}
static CUresult i_cuMemAllocPitch(unsigned *p, unsigned *pitch, unsigned w, unsigned h, unsigned e) {
  ST.calls_legacy++;
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !pitch || !w || !h || (e != 4 && e != 8 && e != 16)) return INVALID_VALUE;
  UNSAFE_CALL();
  unsigned pt = (unsigned)((w + g_pitch_align - 1) / g_pitch_align * g_pitch_align); u64 k; int r = track(K_PTR, cur_dev, (u64)pt * h, &k, 1);
  if (r == OK) { *p = (unsigned)k; *pitch = pt; } return r;
}
static CUresult i_cuMemFree_v2(CUdeviceptr p) { CHECK_INIT(); UNSAFE_CALL(); return untrack(K_PTR, p); }
static CUresult i_cuMemFree(unsigned p) { ST.calls_legacy++; CHECK_INIT(); UNSAFE_CALL(); return untrack(K_PTR, p); }
static CUresult i_cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { if (f != 1 && f != 2) return INVALID_VALUE; /* CU_MEM_ATTACH_GLOBAL / _HOST */ return i_cuMemAlloc_v2(p, n); }
static CUresult i_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
  CHECK_INIT(); if (!p || !n) return INVALID_VALUE;
  int d = stream_dev(s); if (d < 0) return INVALID_CONTEXT;
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s);
  if (ci >= 0) { /* a memory node of the capture's graph */
    if (caps[ci].invalid) return E_CAP_INVALIDATED;
    pthread_mutex_lock(&mu); u64 va; int r = graph_add_alloc(caps[ci].graph, n, &va); pthread_mutex_unlock(&mu);
    if (r == OK) *p = va; return r;
  }
  pthread_mutex_lock(&mu); default_pool(d); int pi = cur_pool[d]; pthread_mutex_unlock(&mu);
  u64 k; int r = pool_alloc(pi, n, &k); if (r == OK) *p = k; return r;
}
static CUresult i_cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { ST.calls_ptsz++; return i_cuMemAllocAsync(p, n, s); }
static CUresult i_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, CUstream s) {
  CHECK_INIT(); if (!p || !n) return INVALID_VALUE; if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  int pi = pool_idx(pool); if (pi < 0 || pools[pi].destroyed) return INVALID_VALUE;
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s);
  if (ci >= 0) {
    if (caps[ci].invalid) return E_CAP_INVALIDATED;
    pthread_mutex_lock(&mu); u64 va; int r = graph_add_alloc(caps[ci].graph, n, &va); pthread_mutex_unlock(&mu);
    if (r == OK) *p = va; return r;
  }
  u64 k; int r = pool_alloc(pi, n, &k); if (r == OK) *p = k; return r;
}
static CUresult i_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, CUstream s) { ST.calls_ptsz++; return i_cuMemAllocFromPoolAsync(p, n, pool, s); }
static CUresult i_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  CHECK_INIT();
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s);
  if (ci >= 0) { /* a free node: of the graph's own allocation (else left to the caller: unsupported here) */
    if (caps[ci].invalid) return E_CAP_INVALIDATED;
    pthread_mutex_lock(&mu); int r = graph_add_free(caps[ci].graph, p); pthread_mutex_unlock(&mu);
    if (r != OK) caps[ci].invalid = 1;
    return r;
  }
  return untrack(K_PTR, p);
}
static CUresult i_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { ST.calls_ptsz++; return i_cuMemFreeAsync(p, s); }
static CUresult i_cuMemPoolTrimTo(void *pool, size_t keep) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0) return INVALID_VALUE; UNSAFE_CALL();
  pthread_mutex_lock(&mu); pool_shrink(&pools[pi], keep); pthread_mutex_unlock(&mu); return OK;
}
struct pool_props { int alloc_type, htypes, loc_type, loc_id; void *win32; size_t max; unsigned short usage; unsigned char reserved[54]; };
static CUresult i_cuMemPoolCreate(void **pool, const struct pool_props *pp) {
  CHECK_INIT(); if (!pool || !pp || pp->loc_type != 1 || pp->loc_id < 0 || pp->loc_id >= g_ndev) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int i = pool_new(pp->loc_id); pthread_mutex_unlock(&mu);
  if (i < 0) return OOM; *pool = POOL_H(i); return OK;
}
static CUresult i_cuMemPoolDestroy(void *pool) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0 || pools[pi].destroyed) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  pools[pi].destroyed = 1; pool_shrink(&pools[pi], 0);
  if (pools[pi].used == 0) pools[pi].live = 0;
  for (int d = 0; d < FAKE_MAX_DEV; d++) if (cur_pool[d] == pi) cur_pool[d] = def_pool[d];
  pthread_mutex_unlock(&mu);
  return OK;
}
static CUresult i_cuMemPoolGetAttribute(void *pool, int attr, void *v) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0 || !v) return INVALID_VALUE; UNSAFE_CALL();
  struct pool *p = &pools[pi];
  switch (attr) {
    case 4: *(u64 *)v = p->threshold; return OK;   /* RELEASE_THRESHOLD */
    case 5: *(u64 *)v = p->reserved; return OK;    /* RESERVED_MEM_CURRENT */
    case 7: *(u64 *)v = p->used; return OK;        /* USED_MEM_CURRENT */
    default: return INVALID_VALUE;
  }
}
static CUresult i_cuMemPoolSetAttribute(void *pool, int attr, void *v) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0 || !v) return INVALID_VALUE;
  if (attr != 4) return INVALID_VALUE;
  pools[pi].threshold = *(u64 *)v; return OK;
}
static CUresult i_cuDeviceGetDefaultMemPool(void **pool, CUdevice d) {
  CHECK_INIT(); if (!pool) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  pthread_mutex_lock(&mu); int i = default_pool(d); pthread_mutex_unlock(&mu); *pool = POOL_H(i); return OK;
}
static CUresult i_cuDeviceGetMemPool(void **pool, CUdevice d) {
  CHECK_INIT(); if (!pool) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  pthread_mutex_lock(&mu); default_pool(d); int i = cur_pool[d]; pthread_mutex_unlock(&mu); *pool = POOL_H(i); return OK;
}
static CUresult i_cuDeviceSetMemPool(CUdevice d, void *pool) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE; int pi = pool_idx(pool); if (pi < 0 || pools[pi].dev != d) return INVALID_VALUE;
  cur_pool[d] = pi; return OK;
}

struct prop { int type, htypes, loc_type, loc_id; void *win32; u64 flags; };
static CUresult i_cuMemCreate(u64 *h, size_t n, const struct prop *p, u64 fl) {
  CHECK_INIT(); if (!h || !p || !n || fl) return INVALID_VALUE; /* flags: reserved, must be 0 */
  if (n % (2u << 20)) return INVALID_VALUE; /* granularity 2 MiB */
  UNSAFE_CALL();
  int dev = -1;
  if (p->loc_type == 1) { if (p->loc_id < 0 || p->loc_id >= g_ndev) return INVALID_DEVICE; dev = p->loc_id; }
  pthread_mutex_lock(&mu);
  int i; for (i = 0; i < MAXPHYS && phys[i].live; i++) {}
  int r = i == MAXPHYS ? OOM : dev >= 0 ? dev_charge(dev, n) : OK; /* host memory: no device charge */
  if (r == OK) { phys[i] = (struct phys){1, dev, 1, 0, n, (next_handle += 16)}; *h = phys[i].handle; ST.vmm_phys_live++; ST.allocs++; }
  pthread_mutex_unlock(&mu);
  return r;
}
static CUresult i_cuMemRelease(u64 h) {
  CHECK_INIT(); pthread_mutex_lock(&mu);
  int i = phys_of(h);
  if (i < 0) { unknown_free(h); pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  phys[i].refs--; phys_maybe_free(i);
  pthread_mutex_unlock(&mu); return OK;
}
static CUresult i_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, u64 fl) {
  (void)align; (void)addr; (void)fl; CHECK_INIT(); if (!p || !size) return INVALID_VALUE;
  pthread_mutex_lock(&mu); *p = new_va(size); pthread_mutex_unlock(&mu); return OK;
}
static CUresult i_cuMemAddressFree(CUdeviceptr p, size_t size) { (void)p; (void)size; CHECK_INIT(); return OK; }
static CUresult i_cuMemMap(CUdeviceptr va, size_t size, size_t off, u64 h, u64 fl) {
  (void)fl; CHECK_INIT(); if (off != 0 || !size) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  int i = phys_of(h);
  if (i < 0 || size > phys[i].size || nmaps == MAXPHYS) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  maps[nmaps++] = (struct map){va, size, i, {0}}; phys[i].maps++;
  pthread_mutex_unlock(&mu); return OK;
}
static CUresult i_cuMemUnmap(CUdeviceptr va, size_t size) {
  CHECK_INIT(); pthread_mutex_lock(&mu);
  int found = 0;
  for (int k = 0; k < nmaps;) {
    if (maps[k].va >= va && maps[k].va + maps[k].size <= va + size) {
      int i = maps[k].ph; phys[i].maps--; phys_maybe_free(i); maps[k] = maps[--nmaps]; found = 1;
    } else k++;
  }
  pthread_mutex_unlock(&mu);
  return found ? OK : INVALID_VALUE;
}
/* cuMemSetAccess: like the driver, the range must be mapped completely,
   every descriptor names a device location, and setting access (for the
   owning device or a peer) allocates nothing. */
struct access_desc { int loc_type, loc_id; unsigned flags; };
static int maps_cover(u64 va, u64 size) {
  u64 cur = va, end = va + size;
  while (cur < end) {
    int k; for (k = 0; k < nmaps; k++) if (maps[k].va == cur) break;
    if (k == nmaps) return 0;
    cur += maps[k].size;
  }
  return 1;
}
static CUresult i_cuMemSetAccess(CUdeviceptr va, size_t size, const struct access_desc *d, size_t count) {
  CHECK_INIT(); if (!d || !count || !size) return INVALID_VALUE;
  for (size_t j = 0; j < count; j++) {
    if (d[j].loc_type != 1) return INVALID_VALUE;
    if (d[j].loc_id < 0 || d[j].loc_id >= g_ndev) return INVALID_DEVICE;
    if (d[j].flags > 3 || d[j].flags == 2) return INVALID_VALUE;
  }
  pthread_mutex_lock(&mu);
  if (!maps_cover(va, size)) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  for (int k = 0; k < nmaps; k++)
    if (maps[k].va >= va && maps[k].va + maps[k].size <= va + size)
      for (size_t j = 0; j < count; j++) maps[k].access[d[j].loc_id] = d[j].flags;
  ST.set_access++;
  pthread_mutex_unlock(&mu); return OK;
}
static CUresult i_cuMemGetAccess(u64 *flags, const struct access_desc *loc, CUdeviceptr p) {
  CHECK_INIT(); if (!flags || !loc || loc->loc_type != 1) return INVALID_VALUE;
  if (loc->loc_id < 0 || loc->loc_id >= g_ndev) return INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  for (int k = 0; k < nmaps; k++) if (p >= maps[k].va && p < maps[k].va + maps[k].size) {
    *flags = maps[k].access[loc->loc_id]; pthread_mutex_unlock(&mu); return OK;
  }
  pthread_mutex_unlock(&mu); return INVALID_VALUE;
}
static CUresult i_cuMemRetainAllocationHandle(u64 *h, void *addr) {
  CHECK_INIT(); if (!h) return INVALID_VALUE; u64 a = (u64)addr;
  pthread_mutex_lock(&mu);
  for (int k = 0; k < nmaps; k++) if (a >= maps[k].va && a < maps[k].va + maps[k].size) {
    struct phys *ph = &phys[maps[k].ph]; ph->refs++; *h = ph->handle; pthread_mutex_unlock(&mu); return OK;
  }
  pthread_mutex_unlock(&mu); return INVALID_VALUE;
}
static CUresult i_cuMemExportToShareableHandle(void *out, u64 h, int type, u64 fl) {
  (void)type; (void)fl; CHECK_INIT(); if (!out) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int i = phys_of(h); pthread_mutex_unlock(&mu);
  if (i < 0) return INVALID_VALUE; *(int *)out = 1000 + i; return OK;
}
/* an import (of this process's export) is one more reference to the same memory */
static CUresult i_cuMemImportFromShareableHandle(u64 *h, void *os, int type) {
  (void)type; CHECK_INIT(); if (!h) return INVALID_VALUE; long i = (long)os - 1000;
  pthread_mutex_lock(&mu);
  if (i < 0 || i >= MAXPHYS || !phys[i].live) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  phys[i].refs++; *h = phys[i].handle; pthread_mutex_unlock(&mu); return OK;
}
static CUresult i_cuMemGetAllocationGranularity(size_t *g, const void *p, int o) { (void)p; (void)o; if (!g) return INVALID_VALUE; *g = 2u << 20; return OK; }

struct adesc { size_t w, h; unsigned fmt, ch; };
struct adesc1 { unsigned w, h, fmt, ch; };
struct a3desc { size_t w, h, d; unsigned fmt, ch, flags; };
struct a3desc1 { unsigned w, h, d, fmt, ch, flags; };
static u64 fmt_bytes(unsigned f) { switch (f) { case 1: case 8: return 1; case 2: case 9: case 0x10: return 2; default: return 4; } }
static CUresult arr_make(u64 bytes, void **h, int kind) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!h) return INVALID_VALUE; UNSAFE_CALL();
  u64 k; int r = track(kind, cur_dev, bytes, &k, 0); if (r == OK) *h = (void *)k; return r;
}
#define MX(a) ((a) ? (a) : 1)
#define BADCH(c) ((c) != 1 && (c) != 2 && (c) != 4) /* NumChannels: 1, 2 or 4 */
static CUresult i_cuArrayCreate_v2(void **h, const struct adesc *d) { if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make(MX(d->w) * MX(d->h) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
static CUresult i_cuArrayCreate(void **h, const struct adesc1 *d) { ST.calls_legacy++; if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make((u64)MX(d->w) * MX(d->h) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
static CUresult i_cuArray3DCreate_v2(void **h, const struct a3desc *d) { if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make(MX(d->w) * MX(d->h) * MX(d->d) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
static CUresult i_cuArray3DCreate(void **h, const struct a3desc1 *d) { ST.calls_legacy++; if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make((u64)MX(d->w) * MX(d->h) * MX(d->d) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
static CUresult i_cuArrayDestroy(void *h) { CHECK_INIT(); return untrack(K_ARRAY, (u64)h); }
static CUresult i_cuMipmappedArrayCreate(void **h, const struct a3desc *d, unsigned levels) {
  if (!d || !levels || BADCH(d->ch)) return INVALID_VALUE;
  u64 tot = 0; size_t w = d->w, hh = d->h, dd = d->d;
  for (unsigned l = 0; l < levels; l++) { tot += MX(w) * MX(hh) * MX(dd) * fmt_bytes(d->fmt) * MX(d->ch); w = w > 1 ? w / 2 : 1; hh = hh > 1 ? hh / 2 : hh; dd = dd > 1 ? dd / 2 : dd; }
  return arr_make(tot, h, K_MIPMAP);
}
static CUresult i_cuMipmappedArrayDestroy(void *h) { CHECK_INIT(); return untrack(K_MIPMAP, (u64)h); }

static CUresult i_cuMemGetInfo_v2(size_t *fr, size_t *tot) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!fr && !tot) return INVALID_VALUE; UNSAFE_CALL();
  u64 used = __atomic_load_n(&S->in_use[cur_dev], __ATOMIC_SEQ_CST) + __atomic_load_n(&S->external[cur_dev], __ATOMIC_SEQ_CST);
  if (fr) *fr = used > g_mem ? 0 : g_mem - used;
  if (tot) *tot = g_mem;
  return OK;
}
static CUresult i_cuMemGetInfo(unsigned *fr, unsigned *tot) {
  ST.calls_legacy++; size_t a, b; CUresult r = i_cuMemGetInfo_v2(fr ? &a : 0, tot ? &b : 0);
  if (r) return r; if (fr) *fr = a > 0xffffffffu ? 0xffffffffu : (unsigned)a; if (tot) *tot = b > 0xffffffffu ? 0xffffffffu : (unsigned)b; return OK;
}
static CUresult i_cuGraphCreate(void **g, unsigned f) {
  (void)f; CHECK_INIT(); if (!g) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int i = graph_new(cur_dev < 0 ? 0 : cur_dev); pthread_mutex_unlock(&mu);
  if (i < 0) return OOM; *g = GRAPH_H(i); return OK;
}
static CUresult i_cuGraphDestroy(void *g) {
  CHECK_INIT(); int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  graphs[i].live = 0; return OK;
}
/* CUDA_MEM_ALLOC_NODE_PARAMS: poolProps.location at 8/12, bytesize at 104, dptr (out) at 112 */
static CUresult i_cuGraphAddMemAllocNode(void **node, void *g, void *deps, size_t n, void *params) {
  (void)deps; (void)n; CHECK_INIT(); if (!node || !params) return INVALID_VALUE;
  int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  u64 b = *(size_t *)((char *)params + 104); if (!b) return INVALID_VALUE;
  int loc = *(int *)((char *)params + 12); if (*(int *)((char *)params + 8) != 1 || loc < 0 || loc >= g_ndev) return INVALID_VALUE;
  pthread_mutex_lock(&mu); graphs[i].dev = loc; u64 va; int r = graph_add_alloc(i, b, &va); pthread_mutex_unlock(&mu);
  if (r) return r;
  *(u64 *)((char *)params + 112) = va; *node = (void *)(0x1234 + va); return OK;
}
static CUresult i_cuGraphAddMemFreeNode(void **node, void *g, void *deps, size_t n, CUdeviceptr p) {
  (void)deps; (void)n; CHECK_INIT(); if (!node) return INVALID_VALUE;
  int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int r = graph_add_free(i, p); pthread_mutex_unlock(&mu);
  if (r == OK) *node = (void *)(0x5678 + p); return r;
}
static CUresult i_cuGraphInstantiateWithFlags(void **e, void *g, u64 f) {
  (void)f; CHECK_INIT(); if (!e) return INVALID_VALUE; int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  int x; for (x = 0; x < MAXGRAPH && gexecs[x].live; x++) {}
  if (x == MAXGRAPH) { pthread_mutex_unlock(&mu); return OOM; }
  gexecs[x].live = 1; gexecs[x].dev = graphs[i].dev; gexecs[x].n = graphs[i].n; gexecs[x].outstanding = 0;
  memcpy(gexecs[x].a, graphs[i].a, sizeof graphs[i].a);
  pthread_mutex_unlock(&mu);
  *e = EXEC_H(x); return OK;
}
static CUresult i_cuGraphExecDestroy(void *e) {
  CHECK_INIT(); int i = h_idx(e, 0xb00000ull, MAXGRAPH); if (i < 0 || !gexecs[i].live) return INVALID_VALUE;
  gexecs[i].live = 0; return OK; /* allocations it left live stay allocated */
}
static CUresult i_cuGraphLaunch(void *e, CUstream s) {
  CHECK_INIT(); int i = h_idx(e, 0xb00000ull, MAXGRAPH); if (i < 0 || !gexecs[i].live) return INVALID_VALUE;
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  if (cap_of(s) >= 0) return OK; /* launched into a capture: a child graph node (no memory now) */
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  struct gexec *x = &gexecs[i];
  int d = x->dev;
  pthread_mutex_lock(&mu);
  if (x->outstanding) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  u64 total = 0, kept = 0;
  for (int j = 0; j < x->n; j++) { total += x->a[j].size; if (!x->a[j].freed) kept += x->a[j].size; }
  u64 need = graph_used[d] + total;
  int r = OK;
  if (need > graph_reserve[d]) { r = dev_charge(d, need - graph_reserve[d]); if (r == OK) graph_reserve[d] = need; }
  if (r == OK && kept) {
    graph_used[d] += kept;
    for (int j = 0; j < x->n; j++) if (!x->a[j].freed) add_rec((struct rec){x->a[j].va, x->a[j].size, d, K_GRAPH, -1, i});
    x->outstanding = 1;
  }
  if (graph_used[d] > graph_used_high[d]) graph_used_high[d] = graph_used[d];
  if (graph_reserve[d] > graph_reserve_high[d]) graph_reserve_high[d] = graph_reserve[d];
  pthread_mutex_unlock(&mu);
  return r;
}
/* a live graph allocation was freed (mu held): the reserve keeps it */
static void graph_freed(int dev, u64 size, int exec, u64 va) {
  graph_used[dev] -= size < graph_used[dev] ? size : graph_used[dev];
  int more = 0;
  for (size_t k = 0; k < nrec; k++) if (recs[k].kind == K_GRAPH && recs[k].pool == exec && recs[k].key != va) more = 1;
  if (!more && exec >= 0 && exec < MAXGRAPH) gexecs[exec].outstanding = 0;
}
static CUresult i_cuDeviceGetGraphMemAttribute(CUdevice d, int attr, void *v) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE; if (!v) return INVALID_VALUE;
  UNSAFE_CALL();
  switch (attr) {
    case 0: *(u64 *)v = graph_used[d]; return OK;         /* USED_MEM_CURRENT */
    case 1: *(u64 *)v = graph_used_high[d]; return OK;    /* USED_MEM_HIGH */
    case 2: *(u64 *)v = graph_reserve[d]; return OK;      /* RESERVED_MEM_CURRENT */
    case 3: *(u64 *)v = graph_reserve_high[d]; return OK; /* RESERVED_MEM_HIGH */
    default: return INVALID_VALUE;
  }
}
static CUresult i_cuDeviceGraphMemTrim(CUdevice d) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  UNSAFE_CALL();
  pthread_mutex_lock(&mu);
  if (graph_reserve[d] > graph_used[d]) { dev_uncharge(d, graph_reserve[d] - graph_used[d]); graph_reserve[d] = graph_used[d]; }
  pthread_mutex_unlock(&mu);
  return OK;
}

/* capture entry points */
static CUresult i_cuStreamBeginCapture_v2(CUstream s, int mode) {
  CHECK_INIT(); if (mode < 0 || mode > 2) return INVALID_VALUE;
  if ((u64)s <= 1) return E_CAP_UNSUPPORTED; /* the legacy stream cannot be captured */
  int si = stream_idx(s); if (si < 0) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  if (caps[si].active) { pthread_mutex_unlock(&mu); return E_ILLEGAL_STATE; }
  int g = graph_new(ctxs[stream_ctx[si]].dev);
  if (g < 0) { pthread_mutex_unlock(&mu); return OOM; }
  caps[si] = (struct cap){1, mode, 0, g, pthread_self(), cap_next_id++};
  if (mode != CAP_RELAXED) t_caps_own++;
  if (mode == CAP_GLOBAL) { t_caps_own_global++; __atomic_fetch_add(&n_caps_global, 1, __ATOMIC_SEQ_CST); }
  pthread_mutex_unlock(&mu);
  return OK;
}
static CUresult i_cuStreamBeginCapture(CUstream s) { return i_cuStreamBeginCapture_v2(s, CAP_GLOBAL); }
static CUresult i_cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { ST.calls_ptsz++; return i_cuStreamBeginCapture_v2(s, mode); }
static CUresult i_cuStreamEndCapture(CUstream s, void **graph) {
  CHECK_INIT(); if (!graph) return INVALID_VALUE;
  int ci = cap_of(s); if (ci < 0) return E_ILLEGAL_STATE;
  struct cap *c = &caps[ci];
  if (c->mode != CAP_RELAXED && !pthread_equal(c->owner, pthread_self())) { c->invalid = 1; return E_CAP_WRONG_THREAD; }
  pthread_mutex_lock(&mu);
  c->active = 0;
  if (c->mode != CAP_RELAXED) t_caps_own--;
  if (c->mode == CAP_GLOBAL) { t_caps_own_global--; __atomic_fetch_sub(&n_caps_global, 1, __ATOMIC_SEQ_CST); }
  int inv = c->invalid;
  if (inv) graphs[c->graph].live = 0;
  pthread_mutex_unlock(&mu);
  if (inv) { *graph = 0; return E_CAP_INVALIDATED; }
  *graph = GRAPH_H(c->graph); return OK;
}
static CUresult i_cuStreamEndCapture_ptsz(CUstream s, void **graph) { ST.calls_ptsz++; return i_cuStreamEndCapture(s, graph); }
/* CUstreamCaptureStatus: NONE 0, ACTIVE 1, INVALIDATED 2 */
static CUresult i_cuStreamIsCapturing(CUstream s, int *st) {
  CHECK_INIT(); if (!st) return INVALID_VALUE;
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  if ((u64)s <= 1 && legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s); *st = ci < 0 ? 0 : caps[ci].invalid ? 2 : 1; return OK;
}
static CUresult i_cuStreamGetCaptureInfo(CUstream s, int *st, unsigned long long *id) {
  int x; CUresult r = i_cuStreamIsCapturing(s, &x); if (r) return r;
  if (st) *st = x; if (id && x) *id = caps[cap_of(s)].id; return OK;
}
static CUresult i_cuStreamGetCaptureInfo_v2(CUstream s, int *st, unsigned long long *id, void **g, const void **deps, size_t *nd) {
  int x; CUresult r = i_cuStreamIsCapturing(s, &x); if (r) return r;
  if (st) *st = x;
  if (x) { int ci = cap_of(s); if (id) *id = caps[ci].id; if (g) *g = GRAPH_H(caps[ci].graph); }
  if (deps) *deps = 0; if (nd) *nd = 0; return OK;
}
static CUresult i_cuStreamGetCaptureInfo_v3(CUstream s, int *st, unsigned long long *id, void **g, const void **deps, const void **ed, size_t *nd) {
  if (ed) *ed = 0; return i_cuStreamGetCaptureInfo_v2(s, st, id, g, deps, nd);
}
static CUresult i_cuThreadExchangeStreamCaptureMode(int *mode) {
  if (!mode || *mode < 0 || *mode > 2) return INVALID_VALUE;
  int old = t_mode; t_mode = *mode; *mode = old; return OK;
}
static CUresult i_cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned sm, void *s, void **p, void **x) {
  (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)sm; (void)s; (void)p; (void)x; return OK;
}
static CUresult i_cuGetProcAddress_v2(const char *, void **, int, u64, int *);
static CUresult i_cuGetProcAddress(const char *s, void **p, int v, u64 f) { return i_cuGetProcAddress_v2(s, p, v, f, 0); }

/* ------------------------------------------------------------ exports */
/* exported entry points are distinct functions from the i_* implementations
   (FAKE_CUDA_GPA_MODE=internal hands out the latter) */
static volatile unsigned long export_calls;
#define E0(name, params, args) CUresult name params { export_calls++; return i_##name args; }
E0(cuInit, (unsigned f), (f))
E0(cuDriverGetVersion, (int *v), (v))
E0(cuDeviceGetCount, (int *n), (n))
E0(cuDeviceGet, (CUdevice *d, int o), (d, o))
E0(cuDeviceGetUuid, (unsigned char *u, CUdevice d), (u, d))
CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) { return i_cuDeviceGetUuid(u, d); }
E0(cuDeviceTotalMem_v2, (size_t *b, CUdevice d), (b, d))
E0(cuDeviceTotalMem, (unsigned *b, CUdevice d), (b, d))
E0(cuCtxCreate_v2, (CUcontext *c, unsigned f, CUdevice d), (c, f, d))
E0(cuCtxCreate, (CUcontext *c, unsigned f, CUdevice d), (c, f, d))
E0(cuCtxCreate_v3, (CUcontext *c, void *p, int n, unsigned f, CUdevice d), (c, p, n, f, d))
E0(cuCtxCreate_v4, (CUcontext *c, void *p, unsigned f, CUdevice d), (c, p, f, d))
E0(cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d), (c, d))
E0(cuDevicePrimaryCtxRelease_v2, (CUdevice d), (d))
E0(cuDevicePrimaryCtxRelease, (CUdevice d), (d))
E0(cuDevicePrimaryCtxReset_v2, (CUdevice d), (d))
E0(cuDevicePrimaryCtxReset, (CUdevice d), (d))
E0(cuDevicePrimaryCtxGetState, (CUdevice d, unsigned *f, int *a), (d, f, a))
E0(cuCtxDestroy_v2, (CUcontext c), (c))
E0(cuCtxDestroy, (CUcontext c), (c))
E0(cuCtxSetCurrent, (CUcontext c), (c))
E0(cuCtxGetCurrent, (CUcontext *c), (c))
E0(cuCtxPushCurrent_v2, (CUcontext c), (c))
E0(cuCtxPopCurrent_v2, (CUcontext *c), (c))
E0(cuCtxGetDevice, (CUdevice *d), (d))
E0(cuCtxSynchronize, (void), ())
E0(cuCtxSetLimit, (int l, size_t v), (l, v))
E0(cuCtxGetLimit, (size_t *v, int l), (v, l))
E0(cuStreamCreate, (CUstream *s, unsigned f), (s, f))
E0(cuStreamDestroy_v2, (CUstream s), (s))
E0(cuStreamGetCtx, (CUstream s, CUcontext *c), (s, c))
E0(cuStreamSynchronize, (CUstream s), (s))
E0(cuStreamSynchronize_ptsz, (CUstream s), (s))
E0(cuEventSynchronize, (void *e), (e))
E0(cuPointerGetAttribute, (void *d, int a, CUdeviceptr p), (d, a, p))
E0(cuMemPoolCreate, (void **p, const struct pool_props *pp), (p, pp))
E0(cuMemPoolDestroy, (void *p), (p))
E0(cuMemPoolGetAttribute, (void *p, int a, void *v), (p, a, v))
E0(cuMemPoolSetAttribute, (void *p, int a, void *v), (p, a, v))
E0(cuDeviceGetDefaultMemPool, (void **p, CUdevice d), (p, d))
E0(cuDeviceGetMemPool, (void **p, CUdevice d), (p, d))
E0(cuDeviceSetMemPool, (CUdevice d, void *p), (d, p))
E0(cuDeviceGetAttribute, (int *v, int a, CUdevice d), (v, a, d))
E0(cuGraphCreate, (void **g, unsigned f), (g, f))
E0(cuGraphInstantiateWithFlags, (void **e, void *g, u64 f), (e, g, f))
E0(cuGraphLaunch, (void *e, CUstream s), (e, s))
E0(cuGraphDestroy, (void *g), (g))
E0(cuGraphExecDestroy, (void *e), (e))
E0(cuGraphAddMemFreeNode, (void **n, void *g, void *d, size_t c, CUdeviceptr p), (n, g, d, c, p))
E0(cuStreamBeginCapture, (CUstream s), (s))
E0(cuStreamBeginCapture_v2, (CUstream s, int m), (s, m))
E0(cuStreamBeginCapture_v2_ptsz, (CUstream s, int m), (s, m))
E0(cuStreamEndCapture, (CUstream s, void **g), (s, g))
E0(cuStreamEndCapture_ptsz, (CUstream s, void **g), (s, g))
E0(cuStreamIsCapturing, (CUstream s, int *st), (s, st))
E0(cuStreamGetCaptureInfo, (CUstream s, int *st, unsigned long long *id), (s, st, id))
E0(cuStreamGetCaptureInfo_v2, (CUstream s, int *st, unsigned long long *id, void **g, const void **d, size_t *n), (s, st, id, g, d, n))
E0(cuStreamGetCaptureInfo_v3, (CUstream s, int *st, unsigned long long *id, void **g, const void **d, const void **ed, size_t *n), (s, st, id, g, d, ed, n))
E0(cuThreadExchangeStreamCaptureMode, (int *m), (m))
E0(cuDeviceGetGraphMemAttribute, (CUdevice d, int a, void *v), (d, a, v))
E0(cuDeviceGraphMemTrim, (CUdevice d), (d))
E0(cuMemAddressReserve, (CUdeviceptr *p, size_t s, size_t a, CUdeviceptr ad, u64 f), (p, s, a, ad, f))
E0(cuMemAddressFree, (CUdeviceptr p, size_t s), (p, s))
E0(cuMemMap, (CUdeviceptr va, size_t s, size_t o, u64 h, u64 f), (va, s, o, h, f))
E0(cuMemUnmap, (CUdeviceptr va, size_t s), (va, s))
E0(cuMemSetAccess, (CUdeviceptr va, size_t s, const struct access_desc *d, size_t n), (va, s, d, n))
E0(cuMemGetAccess, (u64 *f, const struct access_desc *l, CUdeviceptr p), (f, l, p))
E0(cuMemRetainAllocationHandle, (u64 *h, void *a), (h, a))
E0(cuMemExportToShareableHandle, (void *o, u64 h, int t, u64 f), (o, h, t, f))
E0(cuMemImportFromShareableHandle, (u64 *h, void *o, int t), (h, o, t))
E0(cuMemAlloc_v2, (CUdeviceptr *p, size_t n), (p, n))
E0(cuMemAlloc, (unsigned *p, unsigned n), (p, n))
E0(cuMemAllocPitch_v2, (CUdeviceptr *p, size_t *pt, size_t w, size_t h, unsigned e), (p, pt, w, h, e))
E0(cuMemAllocPitch, (unsigned *p, unsigned *pt, unsigned w, unsigned h, unsigned e), (p, pt, w, h, e))
E0(cuMemFree_v2, (CUdeviceptr p), (p))
E0(cuMemFree, (unsigned p), (p))
E0(cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned f), (p, n, f))
E0(cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))
E0(cuMemAllocAsync_ptsz, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))
E0(cuMemAllocFromPoolAsync, (CUdeviceptr *p, size_t n, void *pool, CUstream s), (p, n, pool, s))
E0(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *p, size_t n, void *pool, CUstream s), (p, n, pool, s))
E0(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
E0(cuMemFreeAsync_ptsz, (CUdeviceptr p, CUstream s), (p, s))
E0(cuMemPoolTrimTo, (void *pool, size_t k), (pool, k))
E0(cuMemCreate, (u64 *h, size_t n, const struct prop *p, u64 f), (h, n, p, f))
E0(cuMemRelease, (u64 h), (h))
E0(cuMemGetAllocationGranularity, (size_t *g, const void *p, int o), (g, p, o))
E0(cuArrayCreate_v2, (void **h, const struct adesc *d), (h, d))
E0(cuArrayCreate, (void **h, const struct adesc1 *d), (h, d))
E0(cuArray3DCreate_v2, (void **h, const struct a3desc *d), (h, d))
E0(cuArray3DCreate, (void **h, const struct a3desc1 *d), (h, d))
E0(cuArrayDestroy, (void *h), (h))
E0(cuMipmappedArrayCreate, (void **h, const struct a3desc *d, unsigned l), (h, d, l))
E0(cuMipmappedArrayDestroy, (void *h), (h))
E0(cuMemGetInfo_v2, (size_t *f, size_t *t), (f, t))
E0(cuMemGetInfo, (unsigned *f, unsigned *t), (f, t))
/* a variant newer than any interceptor table knows (cudaVersion 99000) */
static CUresult i_cuMemGetInfo_v99(size_t *f, size_t *t) { export_calls++; return i_cuMemGetInfo_v2(f, t); }
CUresult cuMemGetInfo_v99(size_t *f, size_t *t) { return i_cuMemGetInfo_v99(f, t); }
E0(cuGraphAddMemAllocNode, (void **n, void *g, void *d, size_t c, void *p), (n, g, d, c, p))
CUresult cuLaunchKernel_ptsz(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned sm, void *s, void **p, void **x) { ST.calls_ptsz++; return i_cuLaunchKernel(f, a, b, c, d, e, g, sm, s, p, x); }
E0(cuLaunchKernel, (void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned sm, void *s, void **p, void **x), (f, a, b, c, d, e, g, sm, s, p, x))
CUresult cuGetProcAddress_v2(const char *s, void **p, int v, u64 f, int *st) { return i_cuGetProcAddress_v2(s, p, v, f, st); }
CUresult cuGetProcAddress(const char *s, void **p, int v, u64 f) { return i_cuGetProcAddress(s, p, v, f); }

/* ------------------------------------------------------------ cuGetProcAddress */
struct gpa_ent { const char *base; int ver; int ptsz; void *exp; void *impl; };
#define G(base, ver, ptsz, name) { base, ver, ptsz, (void *)name, (void *)i_##name }
static const struct gpa_ent GPA[] = {
  G("cuInit", 2000, 0, cuInit), G("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
  G("cuDeviceGetCount", 2000, 0, cuDeviceGetCount), G("cuDeviceGet", 2000, 0, cuDeviceGet),
  G("cuDeviceGetUuid", 9020, 0, cuDeviceGetUuid), { "cuDeviceGetUuid", 11040, 0, (void *)cuDeviceGetUuid_v2, (void *)i_cuDeviceGetUuid },
  G("cuDeviceTotalMem", 2000, 0, cuDeviceTotalMem), G("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
  G("cuCtxCreate", 2000, 0, cuCtxCreate), G("cuCtxCreate", 3020, 0, cuCtxCreate_v2),
  G("cuCtxCreate", 11040, 0, cuCtxCreate_v3), G("cuCtxCreate", 12050, 0, cuCtxCreate_v4),
  G("cuDevicePrimaryCtxRetain", 7000, 0, cuDevicePrimaryCtxRetain), G("cuDevicePrimaryCtxRelease", 11000, 0, cuDevicePrimaryCtxRelease_v2),
  G("cuDevicePrimaryCtxRelease", 7000, 0, cuDevicePrimaryCtxRelease),
  G("cuDevicePrimaryCtxReset", 7000, 0, cuDevicePrimaryCtxReset), G("cuDevicePrimaryCtxReset", 11000, 0, cuDevicePrimaryCtxReset_v2),
  G("cuDevicePrimaryCtxGetState", 7000, 0, cuDevicePrimaryCtxGetState),
  G("cuCtxDestroy", 2000, 0, cuCtxDestroy), G("cuCtxDestroy", 4000, 0, cuCtxDestroy_v2), G("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent), G("cuCtxGetDevice", 2000, 0, cuCtxGetDevice),
  G("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent), G("cuCtxPushCurrent", 4000, 0, cuCtxPushCurrent_v2), G("cuCtxPopCurrent", 4000, 0, cuCtxPopCurrent_v2),
  G("cuCtxSynchronize", 2000, 0, cuCtxSynchronize), G("cuCtxSetLimit", 3010, 0, cuCtxSetLimit), G("cuCtxGetLimit", 3010, 0, cuCtxGetLimit),
  G("cuStreamCreate", 2000, 0, cuStreamCreate), G("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2), G("cuStreamGetCtx", 9020, 0, cuStreamGetCtx),
  G("cuStreamSynchronize", 2000, 0, cuStreamSynchronize), G("cuStreamSynchronize", 7000, 1, cuStreamSynchronize_ptsz),
  G("cuEventSynchronize", 2000, 0, cuEventSynchronize), G("cuPointerGetAttribute", 4000, 0, cuPointerGetAttribute),
  G("cuMemPoolCreate", 11020, 0, cuMemPoolCreate), G("cuMemPoolDestroy", 11020, 0, cuMemPoolDestroy),
  G("cuMemPoolGetAttribute", 11020, 0, cuMemPoolGetAttribute), G("cuMemPoolSetAttribute", 11020, 0, cuMemPoolSetAttribute),
  G("cuDeviceGetDefaultMemPool", 11020, 0, cuDeviceGetDefaultMemPool), G("cuDeviceGetMemPool", 11020, 0, cuDeviceGetMemPool),
  G("cuDeviceSetMemPool", 11020, 0, cuDeviceSetMemPool),
  G("cuDeviceGetAttribute", 2000, 0, cuDeviceGetAttribute), G("cuGraphCreate", 10000, 0, cuGraphCreate), G("cuGraphInstantiateWithFlags", 11040, 0, cuGraphInstantiateWithFlags),
  G("cuGraphLaunch", 10000, 0, cuGraphLaunch), G("cuDeviceGetGraphMemAttribute", 11040, 0, cuDeviceGetGraphMemAttribute),
  G("cuDeviceGraphMemTrim", 11040, 0, cuDeviceGraphMemTrim),
  G("cuGraphDestroy", 10000, 0, cuGraphDestroy), G("cuGraphExecDestroy", 10000, 0, cuGraphExecDestroy),
  G("cuGraphAddMemFreeNode", 11040, 0, cuGraphAddMemFreeNode),
  G("cuStreamBeginCapture", 10000, 0, cuStreamBeginCapture), G("cuStreamBeginCapture", 10010, 0, cuStreamBeginCapture_v2),
  G("cuStreamBeginCapture", 10010, 1, cuStreamBeginCapture_v2_ptsz),
  G("cuStreamEndCapture", 10000, 0, cuStreamEndCapture), G("cuStreamEndCapture", 10000, 1, cuStreamEndCapture_ptsz),
  G("cuStreamIsCapturing", 10000, 0, cuStreamIsCapturing),
  G("cuStreamGetCaptureInfo", 10010, 0, cuStreamGetCaptureInfo), G("cuStreamGetCaptureInfo", 11030, 0, cuStreamGetCaptureInfo_v2),
  G("cuStreamGetCaptureInfo", 12030, 0, cuStreamGetCaptureInfo_v3),
  G("cuThreadExchangeStreamCaptureMode", 10010, 0, cuThreadExchangeStreamCaptureMode),
  G("cuMemAddressReserve", 10020, 0, cuMemAddressReserve), G("cuMemAddressFree", 10020, 0, cuMemAddressFree),
  G("cuMemMap", 10020, 0, cuMemMap), G("cuMemUnmap", 10020, 0, cuMemUnmap),
  G("cuMemSetAccess", 10020, 0, cuMemSetAccess), G("cuMemGetAccess", 10020, 0, cuMemGetAccess),
  G("cuMemRetainAllocationHandle", 11000, 0, cuMemRetainAllocationHandle),
  G("cuMemExportToShareableHandle", 10020, 0, cuMemExportToShareableHandle), G("cuMemImportFromShareableHandle", 10020, 0, cuMemImportFromShareableHandle),
  G("cuMemAlloc", 2000, 0, cuMemAlloc), G("cuMemAlloc", 3020, 0, cuMemAlloc_v2),
  G("cuMemAllocPitch", 2000, 0, cuMemAllocPitch), G("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2),
  G("cuMemFree", 2000, 0, cuMemFree), G("cuMemFree", 3020, 0, cuMemFree_v2),
  G("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
  G("cuMemAllocAsync", 11020, 0, cuMemAllocAsync), G("cuMemAllocAsync", 11020, 1, cuMemAllocAsync_ptsz),
  G("cuMemAllocFromPoolAsync", 11020, 0, cuMemAllocFromPoolAsync), G("cuMemAllocFromPoolAsync", 11020, 1, cuMemAllocFromPoolAsync_ptsz),
  G("cuMemFreeAsync", 11020, 0, cuMemFreeAsync), G("cuMemFreeAsync", 11020, 1, cuMemFreeAsync_ptsz),
  G("cuMemPoolTrimTo", 11020, 0, cuMemPoolTrimTo),
  G("cuMemCreate", 10020, 0, cuMemCreate), G("cuMemRelease", 10020, 0, cuMemRelease),
  G("cuMemGetAllocationGranularity", 10020, 0, cuMemGetAllocationGranularity),
  G("cuArrayCreate", 2000, 0, cuArrayCreate), G("cuArrayCreate", 3020, 0, cuArrayCreate_v2),
  G("cuArray3DCreate", 2000, 0, cuArray3DCreate), G("cuArray3DCreate", 3020, 0, cuArray3DCreate_v2),
  G("cuArrayDestroy", 2000, 0, cuArrayDestroy),
  G("cuMipmappedArrayCreate", 5000, 0, cuMipmappedArrayCreate), G("cuMipmappedArrayDestroy", 5000, 0, cuMipmappedArrayDestroy),
  G("cuMemGetInfo", 2000, 0, cuMemGetInfo), G("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2), G("cuMemGetInfo", 99000, 0, cuMemGetInfo_v99),
  G("cuGraphAddMemAllocNode", 11040, 0, cuGraphAddMemAllocNode),
  G("cuLaunchKernel", 4000, 0, cuLaunchKernel), { "cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz, (void *)cuLaunchKernel_ptsz },
  G("cuGetProcAddress", 11030, 0, cuGetProcAddress), G("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
};

static CUresult i_cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *st) {
  __atomic_fetch_add(&ST.gpa_calls, 1, __ATOMIC_RELAXED);
  if (!sym || !pfn) return INVALID_VALUE;
  int want_ptsz = (flags & 2) != 0, fam_ptsz = 0, known = 0;
  const struct gpa_ent *best = 0;
  size_t n = sizeof GPA / sizeof GPA[0];
  for (size_t i = 0; i < n; i++) if (!strcmp(GPA[i].base, sym)) { known = 1; if (GPA[i].ptsz) fam_ptsz = 1; }
  for (size_t i = 0; i < n; i++) {
    const struct gpa_ent *e = &GPA[i];
    if (strcmp(e->base, sym) || e->ver > ver) continue;
    if (fam_ptsz && e->ptsz != want_ptsz) continue;
    if (!best || e->ver > best->ver) best = e;
  }
  if (!best) { *pfn = 0; if (st) *st = known ? 2 : 1; return NOT_FOUND; }
  *pfn = g_internal_gpa ? best->impl : best->exp;
  if (st) *st = 0;
  return OK;
}

/* ------------------------------------------------------------ test hooks (not CUDA API) */
void fake_cuda_stats(struct fake_stats *out) {
  fake_init();
  pthread_mutex_lock(&mu);
  *out = ST;
  for (int d = 0; d < FAKE_MAX_DEV; d++) { out->in_use[d] = S->in_use[d]; out->peak[d] = S->peak[d]; out->pool_reserved[d] = out->pool_used[d] = 0; }
  for (int i = 0; i < MAXPOOL; i++) if (pools[i].live) { out->pool_reserved[pools[i].dev] += pools[i].reserved; out->pool_used[pools[i].dev] += pools[i].used; }
  out->shared_unknown_frees = S->unknown_frees; out->shared_refused = S->refused;
  pthread_mutex_unlock(&mu);
}
void fake_cuda_set_external(int dev, unsigned long long bytes) { fake_init(); S->external[dev] = bytes; }
/* an exported pointer vs the one cuGetProcAddress would hand out */
void *fake_cuda_impl_of(const char *sym, int ver, unsigned long long flags) {
  int save = g_internal_gpa; g_internal_gpa = 1; void *p = 0; i_cuGetProcAddress_v2(sym, &p, ver, flags, 0); g_internal_gpa = save; return p;
}
/* the next free of a known pointer fails in the driver (the record stays) */
void fake_cuda_fail_next_free(void) { g_fail_next_free = 1; }
/* prohibited calls made during a capture so far */
unsigned long long fake_cuda_capture_violations(void) { return __atomic_load_n(&capture_violations, __ATOMIC_SEQ_CST); }
/* set the peak to the current use (a test measures its own phase) */
void fake_cuda_reset_peak(void) { fake_init(); for (int d = 0; d < FAKE_MAX_DEV; d++) S->peak[d] = S->in_use[d]; }
