/* The fake libcuda.so.1 (tests/fake/fake_cuda.c): the exported entry points, cuGetProcAddress (version and ptsz aware) and the test hooks. */
#include "fake_cuda_internal.h"

CUresult i_cuGetProcAddress_v2(const char *, void **, int, u64, int *);
CUresult i_cuGetProcAddress(const char *s, void **p, int v, u64 f) { return i_cuGetProcAddress_v2(s, p, v, f, 0); }

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
E0(cuMemAdvise, (CUdeviceptr p, size_t n, int a, CUdevice d), (p, n, a, d))
E0(cuMemAdvise_v2, (CUdeviceptr p, size_t n, int a, struct mem_loc l), (p, n, a, l))
E0(cuMemPrefetchAsync, (CUdeviceptr p, size_t n, CUdevice d, CUstream s), (p, n, d, s))
E0(cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, struct mem_loc l, unsigned f, CUstream s), (p, n, l, f, s))
CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice d, CUstream s) { ST.calls_ptsz++; return i_cuMemPrefetchAsync(p, n, d, s); }
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, struct mem_loc l, unsigned f, CUstream s) { ST.calls_ptsz++; return i_cuMemPrefetchAsync_v2(p, n, l, f, s); }
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
  G("cuMemAdvise", 8000, 0, cuMemAdvise), G("cuMemAdvise", 12020, 0, cuMemAdvise_v2),
  G("cuMemPrefetchAsync", 8000, 0, cuMemPrefetchAsync), { "cuMemPrefetchAsync", 8000, 1, (void *)cuMemPrefetchAsync_ptsz, (void *)cuMemPrefetchAsync_ptsz },
  G("cuMemPrefetchAsync", 12020, 0, cuMemPrefetchAsync_v2), { "cuMemPrefetchAsync", 12020, 1, (void *)cuMemPrefetchAsync_v2_ptsz, (void *)cuMemPrefetchAsync_v2_ptsz },
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

CUresult i_cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *st) {
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
/* the MPS client state of this process, taken at its first cuInit (fake_cuda.c,
   mps_client_init): "mps=1 pct=<P|-> mem=<M|-> pipe=<dir>" when the control
   daemon accepted it, "mps=0" when it ran outside MPS; returns the length
   (snprintf's), or -1 with "uninit" before this process called cuInit. Not
   under a cu name: a test reads it whatever the environment says now. */
int fakeMpsClientInfo(char *buf, size_t n) { return fake_mps_info(buf, n); }
