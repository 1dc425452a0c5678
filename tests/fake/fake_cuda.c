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

enum { OK = 0, INVALID_VALUE = 1, OOM = 2, NOT_INIT = 3, INVALID_DEVICE = 101,
       INVALID_CONTEXT = 201, NOT_FOUND = 500 };

static int g_ndev = 1;
static u64 g_mem = 1ull << 30;
static int g_internal_gpa = 0;
static struct fake_shared *S;
static struct fake_stats ST;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int cur_dev = -1;
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
}

/* reclaim the shared records of dead processes (their memory is gone) */
static void reap_dead(void) {
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int pid = __atomic_load_n(&S->procs[i].pid, __ATOMIC_SEQ_CST);
    if (pid == 0 || pid == getpid()) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
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
struct rec { u64 key; u64 size; int dev; int kind; };
static struct rec *recs; static size_t nrec, caprec;
static u64 next_ptr = 0x7f0000000000ull, next_ptr32 = 0x10000000ull, next_handle = 0x50000000ull;

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

static int track(int kind, int dev, u64 size, u64 *out, int narrow) {
  pthread_mutex_lock(&mu);
  int r = dev_charge(dev, size);
  if (r == OK) {
    if (nrec == caprec) { caprec = caprec ? caprec * 2 : 1024; recs = realloc(recs, caprec * sizeof *recs); }
    u64 key;
    if (kind == 2) key = (next_handle += 16);
    else if (narrow) { key = next_ptr32; next_ptr32 += (size + 4095) & ~4095ull; if (!size) next_ptr32 += 4096; }
    else { key = next_ptr; next_ptr += ((size + 0xfffff) & ~0xfffffull) + 0x100000; }
    recs[nrec++] = (struct rec){key, size, dev, kind};
    ST.allocs++;
    *out = key;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static int untrack(int kind, u64 key) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec; i++) {
    if (recs[i].key == key && recs[i].kind == kind) {
      dev_uncharge(recs[i].dev, recs[i].size);
      recs[i] = recs[--nrec];
      ST.frees++;
      pthread_mutex_unlock(&mu);
      return OK;
    }
  }
  ST.unknown_frees++;
  ST.last_unknown_free = key;
  __atomic_fetch_add(&S->unknown_frees, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&mu);
  return INVALID_VALUE;
}

static int need_ctx(void) { return cur_dev < 0 ? INVALID_CONTEXT : OK; }

/* ------------------------------------------------------------ implementations */
#define CHECK_INIT() do { if (!g_inited) return NOT_INIT; } while (0)

static CUresult i_cuInit(unsigned f) { (void)f; fake_init(); return OK; }
static CUresult i_cuDriverGetVersion(int *v) { if (!v) return INVALID_VALUE; *v = 13000; return OK; }
static CUresult i_cuDeviceGetCount(int *n) { CHECK_INIT(); if (!n) return INVALID_VALUE; *n = g_ndev; return OK; }
static CUresult i_cuDeviceGet(CUdevice *d, int o) { CHECK_INIT(); if (!d) return INVALID_VALUE; if (o < 0 || o >= g_ndev) return INVALID_DEVICE; *d = o; return OK; }
static void uuid_of(int dev, unsigned char u[16]) { for (int i = 0; i < 16; i++) u[i] = 0x11 * (i % 15 + 1); u[0] = 0xfa; u[1] = 0xce; u[15] = (unsigned char)dev; }
static CUresult i_cuDeviceGetUuid(unsigned char *u, CUdevice d) { CHECK_INIT(); if (!u) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; uuid_of(d, u); return OK; }
static CUresult i_cuDeviceTotalMem_v2(size_t *b, CUdevice d) { CHECK_INIT(); if (!b) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; *b = g_mem; return OK; }
static CUresult i_cuDeviceTotalMem(unsigned *b, CUdevice d) { ST.calls_legacy++; size_t t; CUresult r = i_cuDeviceTotalMem_v2(b ? &t : 0, d); if (r == OK) *b = t > 0xffffffffu ? 0xffffffffu : (unsigned)t; return r; }
static CUresult i_cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d) { (void)f; CHECK_INIT(); if (!c) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; cur_dev = d; *c = (CUcontext)(long)(d + 1); return OK; }
static CUresult i_cuCtxCreate(CUcontext *c, unsigned f, CUdevice d) { ST.calls_legacy++; return i_cuCtxCreate_v2(c, f, d); }
static CUresult i_cuCtxCreate_v3(CUcontext *c, void *p, int n, unsigned f, CUdevice d) { (void)p; (void)n; return i_cuCtxCreate_v2(c, f, d); }
static CUresult i_cuCtxCreate_v4(CUcontext *c, void *p, unsigned f, CUdevice d) { (void)p; return i_cuCtxCreate_v2(c, f, d); }
static CUresult i_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return i_cuCtxCreate_v2(c, 0, d); }
static CUresult i_cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return OK; }
static CUresult i_cuCtxDestroy_v2(CUcontext c) { (void)c; return OK; }
static CUresult i_cuCtxSetCurrent(CUcontext c) { CHECK_INIT(); long d = (long)c - 1; if (d < -1 || d >= g_ndev) return INVALID_CONTEXT; cur_dev = (int)d; return OK; }
static CUresult i_cuCtxGetDevice(CUdevice *d) { CHECK_INIT(); if (!d) return INVALID_VALUE; if (cur_dev < 0) return INVALID_CONTEXT; *d = cur_dev; return OK; }

static CUresult i_cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE;
  u64 k; int r = track(1, cur_dev, n, &k, 0); if (r == OK) *p = k; return r;
}
static CUresult i_cuMemAlloc(unsigned *p, unsigned n) {
  ST.calls_legacy++;
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE;
  u64 k; int r = track(1, cur_dev, n, &k, 1); if (r == OK) *p = (unsigned)k; return r;
}
static CUresult i_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !pitch || !w || !h || (e != 4 && e != 8 && e != 16)) return INVALID_VALUE;
  size_t pt = (w + 511) & ~(size_t)511; u64 k; int r = track(1, cur_dev, (u64)pt * h, &k, 0);
  if (r == OK) { *p = k; *pitch = pt; } return r;
}
static CUresult i_cuMemAllocPitch(unsigned *p, unsigned *pitch, unsigned w, unsigned h, unsigned e) {
  ST.calls_legacy++;
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !pitch || !w || !h || (e != 4 && e != 8 && e != 16)) return INVALID_VALUE;
  unsigned pt = (w + 511) & ~511u; u64 k; int r = track(1, cur_dev, (u64)pt * h, &k, 1);
  if (r == OK) { *p = (unsigned)k; *pitch = pt; } return r;
}
static CUresult i_cuMemFree_v2(CUdeviceptr p) { CHECK_INIT(); return untrack(1, p); }
static CUresult i_cuMemFree(unsigned p) { ST.calls_legacy++; CHECK_INIT(); return untrack(1, p); }
static CUresult i_cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { (void)f; return i_cuMemAlloc_v2(p, n); }
static CUresult i_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return i_cuMemAlloc_v2(p, n); }
static CUresult i_cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { ST.calls_ptsz++; return i_cuMemAllocAsync(p, n, s); }
static CUresult i_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, CUstream s) { (void)pool; return i_cuMemAllocAsync(p, n, s); }
static CUresult i_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, CUstream s) { ST.calls_ptsz++; return i_cuMemAllocFromPoolAsync(p, n, pool, s); }
static CUresult i_cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return i_cuMemFree_v2(p); }
static CUresult i_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { ST.calls_ptsz++; return i_cuMemFreeAsync(p, s); }
static CUresult i_cuMemPoolTrimTo(void *pool, size_t keep) { (void)pool; (void)keep; return OK; }

struct prop { int type, htypes, loc_type, loc_id; void *win32; u64 flags; };
static CUresult i_cuMemCreate(u64 *h, size_t n, const struct prop *p, u64 fl) {
  (void)fl; CHECK_INIT(); if (!h || !p || !n) return INVALID_VALUE;
  if (n % (2u << 20)) return INVALID_VALUE; /* granularity 2 MiB */
  if (p->loc_type == 1) { if (p->loc_id < 0 || p->loc_id >= g_ndev) return INVALID_DEVICE; u64 k; int r = track(2, p->loc_id, n, &k, 0); if (r == OK) *h = k; return r; }
  /* host memory: no device charge */
  u64 k = 0; pthread_mutex_lock(&mu); k = (next_handle += 16); pthread_mutex_unlock(&mu);
  *h = k; return OK;
}
static CUresult i_cuMemRelease(u64 h) { CHECK_INIT(); int r = untrack(2, h); return r == OK || (h >= 0x50000000ull && h < next_handle + 16) ? OK : r; }
static CUresult i_cuMemGetAllocationGranularity(size_t *g, const void *p, int o) { (void)p; (void)o; if (!g) return INVALID_VALUE; *g = 2u << 20; return OK; }

struct adesc { size_t w, h; unsigned fmt, ch; };
struct adesc1 { unsigned w, h, fmt, ch; };
struct a3desc { size_t w, h, d; unsigned fmt, ch, flags; };
struct a3desc1 { unsigned w, h, d, fmt, ch, flags; };
static u64 fmt_bytes(unsigned f) { switch (f) { case 1: case 8: return 1; case 2: case 9: case 0x10: return 2; default: return 4; } }
static CUresult arr_make(u64 bytes, void **h, int kind) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!h) return INVALID_VALUE;
  u64 k; int r = track(kind, cur_dev, bytes, &k, 0); if (r == OK) *h = (void *)k; return r;
}
#define MX(a) ((a) ? (a) : 1)
static CUresult i_cuArrayCreate_v2(void **h, const struct adesc *d) { if (!d) return INVALID_VALUE; return arr_make(MX(d->w) * MX(d->h) * fmt_bytes(d->fmt) * MX(d->ch), h, 3); }
static CUresult i_cuArrayCreate(void **h, const struct adesc1 *d) { ST.calls_legacy++; if (!d) return INVALID_VALUE; return arr_make((u64)MX(d->w) * MX(d->h) * fmt_bytes(d->fmt) * MX(d->ch), h, 3); }
static CUresult i_cuArray3DCreate_v2(void **h, const struct a3desc *d) { if (!d) return INVALID_VALUE; return arr_make(MX(d->w) * MX(d->h) * MX(d->d) * fmt_bytes(d->fmt) * MX(d->ch), h, 3); }
static CUresult i_cuArray3DCreate(void **h, const struct a3desc1 *d) { ST.calls_legacy++; if (!d) return INVALID_VALUE; return arr_make((u64)MX(d->w) * MX(d->h) * MX(d->d) * fmt_bytes(d->fmt) * MX(d->ch), h, 3); }
static CUresult i_cuArrayDestroy(void *h) { CHECK_INIT(); return untrack(3, (u64)h); }
static CUresult i_cuMipmappedArrayCreate(void **h, const struct a3desc *d, unsigned levels) {
  if (!d || !levels) return INVALID_VALUE;
  u64 tot = 0; size_t w = d->w, hh = d->h, dd = d->d;
  for (unsigned l = 0; l < levels; l++) { tot += MX(w) * MX(hh) * MX(dd) * fmt_bytes(d->fmt) * MX(d->ch); w = w > 1 ? w / 2 : 1; hh = hh > 1 ? hh / 2 : hh; dd = dd > 1 ? dd / 2 : dd; }
  return arr_make(tot, h, 4);
}
static CUresult i_cuMipmappedArrayDestroy(void *h) { CHECK_INIT(); return untrack(4, (u64)h); }

static CUresult i_cuMemGetInfo_v2(size_t *fr, size_t *tot) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!fr && !tot) return INVALID_VALUE;
  u64 used = __atomic_load_n(&S->in_use[cur_dev], __ATOMIC_SEQ_CST) + __atomic_load_n(&S->external[cur_dev], __ATOMIC_SEQ_CST);
  if (fr) *fr = used > g_mem ? 0 : g_mem - used;
  if (tot) *tot = g_mem;
  return OK;
}
static CUresult i_cuMemGetInfo(unsigned *fr, unsigned *tot) {
  ST.calls_legacy++; size_t a, b; CUresult r = i_cuMemGetInfo_v2(fr ? &a : 0, tot ? &b : 0);
  if (r) return r; if (fr) *fr = a > 0xffffffffu ? 0xffffffffu : (unsigned)a; if (tot) *tot = b > 0xffffffffu ? 0xffffffffu : (unsigned)b; return OK;
}
static CUresult i_cuGraphAddMemAllocNode(void **node, void *g, void *deps, size_t n, void *params) {
  (void)g; (void)deps; (void)n; CHECK_INIT(); if (!node || !params) return INVALID_VALUE; *node = (void *)0x1234; return OK;
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
E0(cuCtxDestroy_v2, (CUcontext c), (c))
E0(cuCtxSetCurrent, (CUcontext c), (c))
E0(cuCtxGetDevice, (CUdevice *d), (d))
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
  G("cuCtxDestroy", 4000, 0, cuCtxDestroy_v2), G("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent), G("cuCtxGetDevice", 2000, 0, cuCtxGetDevice),
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
  for (int d = 0; d < FAKE_MAX_DEV; d++) { out->in_use[d] = S->in_use[d]; out->peak[d] = S->peak[d]; }
  out->shared_unknown_frees = S->unknown_frees; out->shared_refused = S->refused;
  pthread_mutex_unlock(&mu);
}
void fake_cuda_set_external(int dev, unsigned long long bytes) { fake_init(); S->external[dev] = bytes; }
/* an exported pointer vs the one cuGetProcAddress would hand out */
void *fake_cuda_impl_of(const char *sym, int ver, unsigned long long flags) {
  int save = g_internal_gpa; g_internal_gpa = 1; void *p = 0; i_cuGetProcAddress_v2(sym, &p, ver, flags, 0); g_internal_gpa = save; return p;
}
