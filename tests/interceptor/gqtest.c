/* Test driver for libgpuquota.so against the fake libcuda/libnvidia-ml.
   Built twice: gqtest_dl (dlopen + dlsym / cuGetProcAddress) and
   gqtest_direct (-DDIRECT: linked against libcuda.so.1).
   Usage: gqtest SUBCOMMAND [args]; exit 0 = pass, messages on stderr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../fake/fake_cuda.h"

typedef int CUresult;
typedef unsigned long long u64;
#define MiB (1ull << 20)

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)
#define REQUIRE(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

struct prop { int type, htypes, loc_type, loc_id; void *win32; u64 flags; };
struct adesc { size_t w, h; unsigned fmt, ch; };
struct adesc1 { unsigned w, h, fmt, ch; };
struct a3desc { size_t w, h, d; unsigned fmt, ch, flags; };
struct a3desc1 { unsigned w, h, d, fmt, ch, flags; };

struct api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuCtxCreate)(void **, unsigned, int);
  CUresult (*cuCtxCreate_v1)(void **, unsigned, int);
  CUresult (*cuCtxCreate_v4)(void **, void *, unsigned, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
  CUresult (*cuCtxSetCurrent)(void *);
  CUresult (*cuMemAlloc)(u64 *, size_t);
  CUresult (*cuMemAlloc_v1)(unsigned *, unsigned);
  CUresult (*cuMemFree)(u64);
  CUresult (*cuMemFree_v1)(unsigned);
  CUresult (*cuMemAllocPitch)(u64 *, size_t *, size_t, size_t, unsigned);
  CUresult (*cuMemAllocPitch_v1)(unsigned *, unsigned *, unsigned, unsigned, unsigned);
  CUresult (*cuMemAllocManaged)(u64 *, size_t, unsigned);
  CUresult (*cuMemAllocAsync)(u64 *, size_t, void *);
  CUresult (*cuMemAllocFromPoolAsync)(u64 *, size_t, void *, void *);
  CUresult (*cuMemFreeAsync)(u64, void *);
  CUresult (*cuMemCreate)(u64 *, size_t, const struct prop *, u64);
  CUresult (*cuMemRelease)(u64);
  CUresult (*cuArrayCreate)(void **, const struct adesc *);
  CUresult (*cuArrayCreate_v1)(void **, const struct adesc1 *);
  CUresult (*cuArray3DCreate)(void **, const struct a3desc *);
  CUresult (*cuArray3DCreate_v1)(void **, const struct a3desc1 *);
  CUresult (*cuArrayDestroy)(void *);
  CUresult (*cuMipmappedArrayCreate)(void **, const struct a3desc *, unsigned);
  CUresult (*cuMipmappedArrayDestroy)(void *);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuMemGetInfo_v1)(unsigned *, unsigned *);
  CUresult (*cuDeviceTotalMem)(size_t *, int);
  CUresult (*cuDeviceTotalMem_v1)(unsigned *, int);
  CUresult (*cuGraphAddMemAllocNode)(void **, void *, void *, size_t, void *);
  CUresult (*cuMemPoolTrimTo)(void *, size_t);
  /* lifetimes (issue 9) */
  CUresult (*cuStreamSynchronize)(void *);
  CUresult (*cuStreamCreate)(void **, unsigned);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuCtxDestroy)(void *);
  CUresult (*cuDevicePrimaryCtxReset)(int);
  CUresult (*cuDevicePrimaryCtxRelease)(int);
  CUresult (*cuMemMap)(u64, size_t, size_t, u64, u64);
  CUresult (*cuMemUnmap)(u64, size_t);
  CUresult (*cuMemAddressReserve)(u64 *, size_t, size_t, u64, u64);
  CUresult (*cuMemRetainAllocationHandle)(u64 *, void *);
  CUresult (*cuMemExportToShareableHandle)(void *, u64, int, u64);
  CUresult (*cuMemImportFromShareableHandle)(u64 *, void *, int);
  CUresult (*cuMemPoolCreate)(void **, const void *);
  CUresult (*cuMemPoolDestroy)(void *);
  CUresult (*cuMemPoolSetAttribute)(void *, int, void *);
  CUresult (*cuMemPoolGetAttribute)(void *, int, void *);
  CUresult (*cuDeviceGetDefaultMemPool)(void **, int);
  CUresult (*cuCtxSetLimit)(int, size_t);
  CUresult (*cuGraphInstantiateWithFlags)(void **, void *, u64);
  CUresult (*cuDeviceGraphMemTrim)(int);
  CUresult (*cuDeviceSetMemPool)(int, void *);
  /* peer access (issue 13) */
  CUresult (*cuMemSetAccess)(u64, size_t, const void *, size_t);
  CUresult (*cuMemGetAccess)(u64 *, const void *, u64);
};
static struct api A;
static void *cuda_h;
static const char *mode = "dlsym";
static void (*fake_stats)(struct fake_stats *);
static void (*fake_set_external)(int, unsigned long long);
static void (*fake_fail_next_free)(void);

typedef CUresult (*gpa2_t)(const char *, void **, int, u64, int *);
typedef CUresult (*gpa1_t)(const char *, void **, int, u64);

#ifdef DIRECT
#define D(n) extern CUresult n();
D(cuInit) D(cuDeviceGet) D(cuCtxCreate_v2) D(cuCtxCreate) D(cuCtxCreate_v4) D(cuDevicePrimaryCtxRetain) D(cuCtxSetCurrent)
D(cuMemAlloc_v2) D(cuMemAlloc) D(cuMemFree_v2) D(cuMemFree) D(cuMemAllocPitch_v2) D(cuMemAllocPitch) D(cuMemAllocManaged)
D(cuMemAllocAsync) D(cuMemAllocFromPoolAsync) D(cuMemFreeAsync) D(cuMemCreate) D(cuMemRelease) D(cuArrayCreate_v2)
D(cuArrayCreate) D(cuArray3DCreate_v2) D(cuArray3DCreate) D(cuArrayDestroy) D(cuMipmappedArrayCreate) D(cuMipmappedArrayDestroy)
D(cuMemGetInfo_v2) D(cuMemGetInfo) D(cuDeviceTotalMem_v2) D(cuDeviceTotalMem) D(cuGraphAddMemAllocNode) D(cuMemPoolTrimTo)
D(cuStreamSynchronize) D(cuStreamCreate) D(cuCtxSynchronize) D(cuCtxDestroy_v2) D(cuDevicePrimaryCtxReset_v2) D(cuDevicePrimaryCtxRelease_v2)
D(cuMemMap) D(cuMemUnmap) D(cuMemAddressReserve) D(cuMemRetainAllocationHandle) D(cuMemExportToShareableHandle)
D(cuMemImportFromShareableHandle) D(cuMemPoolCreate) D(cuMemPoolDestroy) D(cuMemPoolSetAttribute) D(cuMemPoolGetAttribute)
D(cuDeviceGetDefaultMemPool) D(cuCtxSetLimit) D(cuGraphInstantiateWithFlags) D(cuDeviceGraphMemTrim) D(cuDeviceSetMemPool)
D(cuMemSetAccess) D(cuMemGetAccess)
#endif

static void *gpa_get(const char *base, int ver, u64 flags) {
  static gpa2_t g2; static gpa1_t g1;
  void *p = 0; int st = -1; CUresult r;
  if (!strcmp(mode, "gpa1")) {
    if (!g1) {
      gpa1_t boot = (gpa1_t)dlsym(cuda_h, "cuGetProcAddress");
      REQUIRE(boot, "no cuGetProcAddress");
      r = boot("cuGetProcAddress", (void **)&g1, 11030, 0);
      REQUIRE(r == 0 && g1, "self-request v1 failed %d", r);
    }
    r = g1(base, &p, ver, flags);
  } else {
    if (!g2) {
      gpa2_t boot = (gpa2_t)dlsym(cuda_h, "cuGetProcAddress_v2");
      REQUIRE(boot, "no cuGetProcAddress_v2");
      r = boot("cuGetProcAddress", (void **)&g2, 12000, 0, &st);
      REQUIRE(r == 0 && g2 && st == 0, "self-request v2 failed %d st %d", r, st);
    }
    r = g2(base, &p, ver, flags, &st);
    if (r == 0) CHECK(st == 0, "symbolStatus %d for %s", st, base);
  }
  return r == 0 ? p : 0;
}

static void resolve(void) {
  cuda_h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(cuda_h, "dlopen libcuda: %s", dlerror());
  fake_stats = (void (*)(struct fake_stats *))dlsym(cuda_h, "fake_cuda_stats");
  fake_set_external = (void (*)(int, unsigned long long))dlsym(cuda_h, "fake_cuda_set_external");
  fake_fail_next_free = (void (*)(void))dlsym(cuda_h, "fake_cuda_fail_next_free");
  REQUIRE(fake_stats && fake_set_external, "not the fake driver");
#ifdef DIRECT
  if (!strcmp(mode, "direct")) {
#define S2(f, n) A.f = (void *)n;
    S2(cuInit, cuInit) S2(cuDeviceGet, cuDeviceGet) S2(cuCtxCreate, cuCtxCreate_v2) S2(cuCtxCreate_v1, cuCtxCreate)
    S2(cuCtxCreate_v4, cuCtxCreate_v4) S2(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain) S2(cuCtxSetCurrent, cuCtxSetCurrent)
    S2(cuMemAlloc, cuMemAlloc_v2) S2(cuMemAlloc_v1, cuMemAlloc) S2(cuMemFree, cuMemFree_v2) S2(cuMemFree_v1, cuMemFree)
    S2(cuMemAllocPitch, cuMemAllocPitch_v2) S2(cuMemAllocPitch_v1, cuMemAllocPitch) S2(cuMemAllocManaged, cuMemAllocManaged)
    S2(cuMemAllocAsync, cuMemAllocAsync) S2(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync) S2(cuMemFreeAsync, cuMemFreeAsync)
    S2(cuMemCreate, cuMemCreate) S2(cuMemRelease, cuMemRelease) S2(cuArrayCreate, cuArrayCreate_v2) S2(cuArrayCreate_v1, cuArrayCreate)
    S2(cuArray3DCreate, cuArray3DCreate_v2) S2(cuArray3DCreate_v1, cuArray3DCreate) S2(cuArrayDestroy, cuArrayDestroy)
    S2(cuMipmappedArrayCreate, cuMipmappedArrayCreate) S2(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy)
    S2(cuMemGetInfo, cuMemGetInfo_v2) S2(cuMemGetInfo_v1, cuMemGetInfo) S2(cuDeviceTotalMem, cuDeviceTotalMem_v2)
    S2(cuDeviceTotalMem_v1, cuDeviceTotalMem) S2(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode) S2(cuMemPoolTrimTo, cuMemPoolTrimTo)
    S2(cuStreamSynchronize, cuStreamSynchronize) S2(cuStreamCreate, cuStreamCreate) S2(cuCtxSynchronize, cuCtxSynchronize)
    S2(cuCtxDestroy, cuCtxDestroy_v2) S2(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2) S2(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)
    S2(cuMemMap, cuMemMap) S2(cuMemUnmap, cuMemUnmap) S2(cuMemAddressReserve, cuMemAddressReserve)
    S2(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle) S2(cuMemExportToShareableHandle, cuMemExportToShareableHandle)
    S2(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle) S2(cuMemPoolCreate, cuMemPoolCreate) S2(cuMemPoolDestroy, cuMemPoolDestroy)
    S2(cuMemPoolSetAttribute, cuMemPoolSetAttribute) S2(cuMemPoolGetAttribute, cuMemPoolGetAttribute)
    S2(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool) S2(cuCtxSetLimit, cuCtxSetLimit)
    S2(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags) S2(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim)
    S2(cuDeviceSetMemPool, cuDeviceSetMemPool) S2(cuMemSetAccess, cuMemSetAccess) S2(cuMemGetAccess, cuMemGetAccess)
    return;
  }
#endif
  if (!strncmp(mode, "gpa", 3)) {
    u64 fl = !strcmp(mode, "gpa_ptsz") ? 2 : 0;
#define G(f, base, ver) A.f = gpa_get(base, ver, fl);
    G(cuInit, "cuInit", 12000) G(cuDeviceGet, "cuDeviceGet", 12000) G(cuCtxCreate, "cuCtxCreate", 11000)
    G(cuCtxCreate_v1, "cuCtxCreate", 2000) G(cuCtxCreate_v4, "cuCtxCreate", 12080)
    G(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 12000) G(cuCtxSetCurrent, "cuCtxSetCurrent", 12000)
    G(cuMemAlloc, "cuMemAlloc", 12000) G(cuMemAlloc_v1, "cuMemAlloc", 2000) G(cuMemFree, "cuMemFree", 12000)
    G(cuMemFree_v1, "cuMemFree", 2000) G(cuMemAllocPitch, "cuMemAllocPitch", 12000) G(cuMemAllocPitch_v1, "cuMemAllocPitch", 2000)
    G(cuMemAllocManaged, "cuMemAllocManaged", 12000) G(cuMemAllocAsync, "cuMemAllocAsync", 12000)
    G(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 12000) G(cuMemFreeAsync, "cuMemFreeAsync", 12000)
    G(cuMemCreate, "cuMemCreate", 12000) G(cuMemRelease, "cuMemRelease", 12000) G(cuArrayCreate, "cuArrayCreate", 12000)
    G(cuArrayCreate_v1, "cuArrayCreate", 2000) G(cuArray3DCreate, "cuArray3DCreate", 12000) G(cuArray3DCreate_v1, "cuArray3DCreate", 2000)
    G(cuArrayDestroy, "cuArrayDestroy", 12000) G(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 12000)
    G(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 12000) G(cuMemGetInfo, "cuMemGetInfo", 12000)
    G(cuMemGetInfo_v1, "cuMemGetInfo", 2000) G(cuDeviceTotalMem, "cuDeviceTotalMem", 12000) G(cuDeviceTotalMem_v1, "cuDeviceTotalMem", 2000)
    G(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 12000) G(cuMemPoolTrimTo, "cuMemPoolTrimTo", 12000)
    G(cuStreamSynchronize, "cuStreamSynchronize", 12000) G(cuStreamCreate, "cuStreamCreate", 12000) G(cuCtxSynchronize, "cuCtxSynchronize", 12000)
    G(cuCtxDestroy, "cuCtxDestroy", 12000) G(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 12000)
    G(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 12000) G(cuMemMap, "cuMemMap", 12000) G(cuMemUnmap, "cuMemUnmap", 12000)
    G(cuMemAddressReserve, "cuMemAddressReserve", 12000) G(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 12000)
    G(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 12000) G(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 12000)
    G(cuMemPoolCreate, "cuMemPoolCreate", 12000) G(cuMemPoolDestroy, "cuMemPoolDestroy", 12000) G(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 12000)
    G(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 12000) G(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 12000)
    G(cuCtxSetLimit, "cuCtxSetLimit", 12000) G(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 12000)
    G(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 12000) G(cuDeviceSetMemPool, "cuDeviceSetMemPool", 12000)
    G(cuMemSetAccess, "cuMemSetAccess", 12000) G(cuMemGetAccess, "cuMemGetAccess", 12000)
    return;
  }
#define L(f, n) A.f = dlsym(cuda_h, n);
  L(cuInit, "cuInit") L(cuDeviceGet, "cuDeviceGet") L(cuCtxCreate, "cuCtxCreate_v2") L(cuCtxCreate_v1, "cuCtxCreate")
  L(cuCtxCreate_v4, "cuCtxCreate_v4") L(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") L(cuCtxSetCurrent, "cuCtxSetCurrent")
  L(cuMemAlloc, "cuMemAlloc_v2") L(cuMemAlloc_v1, "cuMemAlloc") L(cuMemFree, "cuMemFree_v2") L(cuMemFree_v1, "cuMemFree")
  L(cuMemAllocPitch, "cuMemAllocPitch_v2") L(cuMemAllocPitch_v1, "cuMemAllocPitch") L(cuMemAllocManaged, "cuMemAllocManaged")
  L(cuMemAllocAsync, "cuMemAllocAsync") L(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync") L(cuMemFreeAsync, "cuMemFreeAsync")
  L(cuMemCreate, "cuMemCreate") L(cuMemRelease, "cuMemRelease") L(cuArrayCreate, "cuArrayCreate_v2") L(cuArrayCreate_v1, "cuArrayCreate")
  L(cuArray3DCreate, "cuArray3DCreate_v2") L(cuArray3DCreate_v1, "cuArray3DCreate") L(cuArrayDestroy, "cuArrayDestroy")
  L(cuMipmappedArrayCreate, "cuMipmappedArrayCreate") L(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy")
  L(cuMemGetInfo, "cuMemGetInfo_v2") L(cuMemGetInfo_v1, "cuMemGetInfo") L(cuDeviceTotalMem, "cuDeviceTotalMem_v2")
  L(cuDeviceTotalMem_v1, "cuDeviceTotalMem") L(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode") L(cuMemPoolTrimTo, "cuMemPoolTrimTo")
  L(cuStreamSynchronize, "cuStreamSynchronize") L(cuStreamCreate, "cuStreamCreate") L(cuCtxSynchronize, "cuCtxSynchronize")
  L(cuCtxDestroy, "cuCtxDestroy_v2") L(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2") L(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
  L(cuMemMap, "cuMemMap") L(cuMemUnmap, "cuMemUnmap") L(cuMemAddressReserve, "cuMemAddressReserve")
  L(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle") L(cuMemExportToShareableHandle, "cuMemExportToShareableHandle")
  L(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle") L(cuMemPoolCreate, "cuMemPoolCreate") L(cuMemPoolDestroy, "cuMemPoolDestroy")
  L(cuMemPoolSetAttribute, "cuMemPoolSetAttribute") L(cuMemPoolGetAttribute, "cuMemPoolGetAttribute")
  L(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool") L(cuCtxSetLimit, "cuCtxSetLimit")
  L(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") L(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim")
  L(cuDeviceSetMemPool, "cuDeviceSetMemPool") L(cuMemSetAccess, "cuMemSetAccess") L(cuMemGetAccess, "cuMemGetAccess")
}

static const char *lib_of(void *p) {
  Dl_info di;
  if (!p || !dladdr(p, &di) || !di.dli_fname) return "?";
  const char *s = strrchr(di.dli_fname, '/');
  return s ? s + 1 : di.dli_fname;
}
static int ours(void *p) { return strstr(lib_of(p), "libgpuquota") != 0; }

static u64 envu(const char *n, u64 def) { const char *e = getenv(n); return e ? strtoull(e, 0, 0) : def; }

static void *ctx_on(int dev) {
  int d; void *c = 0;
  REQUIRE(A.cuInit(0) == 0, "cuInit");
  REQUIRE(A.cuDeviceGet(&d, dev) == 0, "cuDeviceGet");
  CUresult r = A.cuCtxCreate(&c, 0, d);
  REQUIRE(r == 0, "cuCtxCreate %d", r);
  return c;
}
static struct fake_stats stats(void) { struct fake_stats s; fake_stats(&s); return s; }
static size_t info_free(void) { size_t f = 0, t = 0; CUresult r = A.cuMemGetInfo(&f, &t); CHECK(r == 0, "meminfo %d", r); return f; }

/* ---------------------------------------------------------------- paths */
/* Each entry path hands out wrappers, and they enforce the slice. */
static int t_paths(void) {
  u64 slice = envu("GQ_SLICE", 0);
  int expect = (int)envu("GQ_EXPECT_WRAPPED", 1);
  void *fs[] = {A.cuMemAlloc, A.cuMemFree, A.cuMemGetInfo, A.cuDeviceTotalMem, A.cuMemAllocAsync, A.cuMemFreeAsync,
                A.cuMemCreate, A.cuMemRelease, A.cuMemAllocManaged, A.cuMemAllocPitch, A.cuArrayCreate, A.cuArrayDestroy,
                A.cuMemAlloc_v1, A.cuMemFree_v1, A.cuMemGetInfo_v1};
  const char *nm[] = {"cuMemAlloc", "cuMemFree", "cuMemGetInfo", "cuDeviceTotalMem", "cuMemAllocAsync", "cuMemFreeAsync",
                      "cuMemCreate", "cuMemRelease", "cuMemAllocManaged", "cuMemAllocPitch", "cuArrayCreate", "cuArrayDestroy",
                      "cuMemAlloc(legacy)", "cuMemFree(legacy)", "cuMemGetInfo(legacy)"};
  for (unsigned i = 0; i < sizeof fs / sizeof fs[0]; i++) {
    REQUIRE(fs[i], "%s not resolved in mode %s", nm[i], mode);
    /* direct link: the symbol is always ours (interposition); it forwards */
    CHECK(ours(fs[i]) == (expect || !strcmp(mode, "direct")), "%s via %s comes from %s (expected %s)", nm[i], mode, lib_of(fs[i]), expect ? "libgpuquota" : "the driver");
  }
  /* not intercepted: the real pointer */
  CHECK(!ours(A.cuInit) && !ours(A.cuCtxSetCurrent), "non-intercepted symbol wrapped in mode %s", mode);
  ctx_on(0);
  struct fake_stats s0 = stats();
  size_t f, t;
  REQUIRE(A.cuMemGetInfo(&f, &t) == 0, "meminfo");
  if (!expect) {
    CHECK(t == envu("FAKE_CUDA_MEM_BYTES", 0), "pass-through total %zu", t);
    u64 p; CHECK(A.cuMemAlloc(&p, 3 * (t / 4)) == 0, "pass-through big alloc"); A.cuMemFree(p);
    return failures ? 1 : 0;
  }
  CHECK(t == slice && f == slice, "meminfo total %zu free %zu, slice %llu", t, f, (unsigned long long)slice);
  size_t tm = 0; CHECK(A.cuDeviceTotalMem(&tm, 0) == 0 && tm == slice, "cuDeviceTotalMem %zu", tm);
  int ptsz = !strcmp(mode, "gpa_ptsz");
  u64 a = 0, b = 0;
  CUresult r = ptsz ? A.cuMemAllocAsync(&a, slice / 8 * 5, 0) : A.cuMemAlloc(&a, slice / 8 * 5);
  CHECK(r == 0, "alloc 5/8 slice: %d", r);
  CHECK(info_free() == slice / 8 * 3, "free after 5/8: %zu", info_free());
  struct fake_stats s1 = stats();
  r = ptsz ? A.cuMemAllocAsync(&b, slice / 2, 0) : A.cuMemAlloc(&b, slice / 2);
  CHECK(r == 2, "alloc 1/2 slice over the limit returned %d, want 2", r);
  struct fake_stats s2 = stats();
  CHECK(s2.allocs == s1.allocs, "refused allocation reached the driver");
  r = ptsz ? A.cuMemFreeAsync(a, 0) : A.cuMemFree(a);
  CHECK(r == 0, "free %d", r);
  if (ptsz) CHECK(A.cuStreamSynchronize(0) == 0, "sync"); /* the pool gives freed memory back at a sync (threshold 0) */
  CHECK(info_free() == slice, "free after free: %zu", info_free());
  r = ptsz ? A.cuMemAllocAsync(&b, slice / 2, 0) : A.cuMemAlloc(&b, slice / 2);
  CHECK(r == 0, "alloc 1/2 after free: %d", r);
  r = ptsz ? A.cuMemFreeAsync(b, 0) : A.cuMemFree(b);
  CHECK(r == 0, "free %d", r);
  struct fake_stats s3 = stats();
  if (ptsz) CHECK(s3.calls_ptsz >= s0.calls_ptsz + 4, "ptsz variants not reached (%llu)", (unsigned long long)(s3.calls_ptsz - s0.calls_ptsz));
  else CHECK(s3.calls_ptsz == s0.calls_ptsz, "ptsz variants used without the flag");
  CHECK(s3.peak[0] <= slice, "driver peak %llu above slice", (unsigned long long)s3.peak[0]);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- apis */
/* every producer is charged by the expected amount and released */
#define CHARGE(what, expect_bytes, alloc_stmt, free_stmt) do { \
    size_t f0 = info_free(); CUresult ra = (alloc_stmt); CHECK(ra == 0, "%s alloc: %d", what, ra); \
    size_t f1 = info_free(); CHECK(f0 - f1 == (expect_bytes), "%s charged %zu, expected %llu", what, f0 - f1, (unsigned long long)(expect_bytes)); \
    CUresult rf = (free_stmt); CHECK(rf == 0, "%s free: %d", what, rf); \
    CHECK(info_free() == f0, "%s not released: %zu vs %zu", what, info_free(), f0); } while (0)

/* a free followed by a synchronisation, in this order; result of both */
#define SEQ(a, b) ({ CUresult r1_ = (a); CUresult r2_ = (b); r1_ | r2_; })
static int t_apis(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  REQUIRE(info_free() == slice, "start free %zu", info_free());
  u64 p; unsigned p32, pitch32; size_t pitch; void *h; u64 vh;
  CHARGE("cuMemAlloc_v2", 3 * MiB, A.cuMemAlloc(&p, 3 * MiB), A.cuMemFree(p));
  CHARGE("cuMemAlloc(legacy)", 5 * MiB, A.cuMemAlloc_v1(&p32, 5 * MiB), A.cuMemFree_v1(p32));
  CHARGE("cuMemAlloc_v2+legacy free", 1 * MiB, A.cuMemAlloc(&p, 1 * MiB), A.cuMemFree(p));
  /* the fake's pitch alignment (FAKE_CUDA_PITCH_ALIGN, 2048) is above the
     interceptor's 512-byte estimate: the charge must follow the driver's pitch */
  CHARGE("cuMemAllocPitch_v2", (u64)pitch * 100, A.cuMemAllocPitch(&p, &pitch, 1000, 100, 4), A.cuMemFree(p));
  CHECK(pitch == 2048, "pitch %zu", pitch);
  CHARGE("cuMemAllocPitch(legacy)", (u64)pitch32 * 300, A.cuMemAllocPitch_v1(&p32, &pitch32, 513, 300, 4), A.cuMemFree_v1(p32));
  CHECK(pitch32 == 2048, "legacy pitch %u", pitch32);
  CHARGE("cuMemAllocManaged", 7 * MiB, A.cuMemAllocManaged(&p, 7 * MiB, 1), A.cuMemFree(p));
  /* stream-ordered: the charge is the pool's reserve, released at a sync (release threshold 0) */
  CHARGE("cuMemAllocAsync", 2 * MiB, A.cuMemAllocAsync(&p, 2 * MiB, 0), SEQ(A.cuMemFreeAsync(p, 0), A.cuStreamSynchronize(0)));
  CHARGE("cuMemAllocAsync+cuMemFree", 2 * MiB, A.cuMemAllocAsync(&p, 2 * MiB, 0), SEQ(A.cuMemFree(p), A.cuCtxSynchronize()));
  void *dpool = 0; REQUIRE(A.cuDeviceGetDefaultMemPool(&dpool, 0) == 0, "default pool");
  CHARGE("cuMemAllocFromPoolAsync", 4 * MiB, A.cuMemAllocFromPoolAsync(&p, 4 * MiB, dpool, 0), SEQ(A.cuMemFreeAsync(p, 0), A.cuMemPoolTrimTo(dpool, 0)));
  CHARGE("cuMemAllocAsync(1 MiB: reserve is 2 MiB)", 2 * MiB, A.cuMemAllocAsync(&p, 1 * MiB, 0), SEQ(A.cuMemFreeAsync(p, 0), A.cuStreamSynchronize(0)));
  struct prop pr = {1, 0, 1, 0, 0, 0};
  CHARGE("cuMemCreate(device)", 4 * MiB, A.cuMemCreate(&vh, 4 * MiB, &pr, 0), A.cuMemRelease(vh));
  struct prop host = {1, 0, 2, 0, 0, 0};
  CHARGE("cuMemCreate(host)", 0, A.cuMemCreate(&vh, 4 * MiB, &host, 0), A.cuMemRelease(vh));
  /* a driver failure rolls the reservation back */
  { size_t f0 = info_free(); CHECK(A.cuMemCreate(&vh, 3 * MiB, &pr, 0) == 1, "unaligned cuMemCreate should fail in the driver");
    CHECK(info_free() == f0, "failed cuMemCreate left a charge"); }
  struct adesc ad = {1000, 100, 0x20, 4};  /* 1000*100*4*4 = 1.6 MB -> 64 KiB granules */
  u64 est = ((1000ull * 100 * 16 + 65535) / 65536) * 65536;
  CHARGE("cuArrayCreate_v2", est, A.cuArrayCreate(&h, &ad), A.cuArrayDestroy(h));
  struct adesc1 ad1 = {1000, 100, 0x20, 4};
  CHARGE("cuArrayCreate(legacy)", est, A.cuArrayCreate_v1(&h, &ad1), A.cuArrayDestroy(h));
  struct a3desc a3 = {64, 64, 64, 0x01, 1, 0};
  CHARGE("cuArray3DCreate_v2", 256 * 1024, A.cuArray3DCreate(&h, &a3), A.cuArrayDestroy(h));
  struct a3desc1 a31 = {64, 64, 64, 0x01, 1, 0};
  CHARGE("cuArray3DCreate(legacy)", 256 * 1024, A.cuArray3DCreate_v1(&h, &a31), A.cuArrayDestroy(h));
  struct a3desc mm = {1024, 1024, 0, 0x01, 1, 0}; /* 1 MiB + 256K + 64K + ... = 1398101 -> 1441792 */
  CHARGE("cuMipmappedArrayCreate", 1441792, A.cuMipmappedArrayCreate(&h, &mm, 11), A.cuMipmappedArrayDestroy(h));
  /* graph memory nodes: admission check only */
  unsigned char params[120]; memset(params, 0, sizeof params);
  *(int *)(params + 8) = 1; *(int *)(params + 12) = 0; *(size_t *)(params + 104) = slice + 1;
  void *node, *gr;
  CUresult (*gcreate)(void **, unsigned) = dlsym(cuda_h, "cuGraphCreate");
  REQUIRE(gcreate && gcreate(&gr, 0) == 0, "graph create");
  CHECK(A.cuGraphAddMemAllocNode(&node, gr, 0, 0, params) == 2, "graph node above the slice not refused");
  *(size_t *)(params + 104) = slice / 2;
  CHECK(A.cuGraphAddMemAllocNode(&node, gr, 0, 0, params) == 0, "graph node within the slice refused");
  /* every producer refuses above the slice without reaching the driver */
  struct fake_stats s0 = stats();
  u64 big = slice + MiB;
  CHECK(A.cuMemAlloc(&p, big) == 2, "cuMemAlloc over");
  CHECK(A.cuMemAlloc_v1(&p32, (unsigned)big) == 2, "cuMemAlloc legacy over");
  CHECK(A.cuMemAllocPitch(&p, &pitch, big / 1024, 1024, 4) == 2, "pitch over");
  CHECK(A.cuMemAllocManaged(&p, big, 1) == 2, "managed over");
  CHECK(A.cuMemAllocAsync(&p, big, 0) == 2, "async over");
  CHECK(A.cuMemAllocFromPoolAsync(&p, big, dpool, 0) == 2, "pool over");
  CHECK(A.cuMemCreate(&vh, (big + (2 << 20)) & ~((2ull << 20) - 1), &pr, 0) == 2, "cuMemCreate over");
  struct adesc bigd = {big / 4 + 1, 1, 0x20, 1};
  CHECK(A.cuArrayCreate(&h, &bigd) == 2, "array over");
  struct fake_stats s1 = stats();
  CHECK(s1.allocs == s0.allocs, "refused calls reached the driver (%llu)", (unsigned long long)(s1.allocs - s0.allocs));
  CHECK(info_free() == slice, "end free %zu", info_free());
  CHECK(s1.calls_legacy > 0, "legacy entry points not reached");
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- frees */
static int t_frees(void) {
  ctx_on(0);
  struct fake_stats s0 = stats();
  CUresult r = A.cuMemFree(0xdead0000ull);
  CHECK(r == 1, "unknown free returned %d, want the driver's 1", r);
  struct fake_stats s1 = stats();
  CHECK(s1.unknown_frees == s0.unknown_frees + 1 && s1.last_unknown_free == 0xdead0000ull, "unknown free did not reach the driver");
  CHECK(A.cuMemFree_v1(0xbeef000) == 1, "legacy unknown free");
  CHECK(A.cuMemFreeAsync(0xdead1000ull, 0) == 1, "unknown async free");
  CHECK(A.cuMemRelease(0x123) == 1, "unknown release");
  CHECK(A.cuArrayDestroy((void *)0x777) == 1, "unknown array destroy");
  struct fake_stats s2 = stats();
  CHECK(s2.unknown_frees == s1.unknown_frees + 4, "unknown frees counted %llu", (unsigned long long)(s2.unknown_frees - s1.unknown_frees));
  /* double free: second reaches the driver, accounting released once */
  u64 p; size_t f0 = info_free();
  CHECK(A.cuMemAlloc(&p, 8 * MiB) == 0, "alloc");
  CHECK(A.cuMemFree(p) == 0, "free");
  CHECK(A.cuMemFree(p) == 1, "double free should be the driver's error");
  CHECK(info_free() == f0, "double free released twice: %zu vs %zu", info_free(), f0);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- meminfo */
static int t_meminfo(void) {
  u64 slice = envu("GQ_SLICE", 0), mem = envu("FAKE_CUDA_MEM_BYTES", 0);
  ctx_on(0);
  size_t f = 0, t = 0;
  CHECK(A.cuMemGetInfo(NULL, NULL) == 1, "NULL,NULL must give the driver's error");
  CHECK(A.cuMemGetInfo(NULL, &t) == 0 && t == slice, "NULL free: total %zu", t);
  CHECK(A.cuMemGetInfo(&f, NULL) == 0 && f == slice, "NULL total: free %zu", f);
  unsigned f32 = 0, t32 = 0;
  CHECK(A.cuMemGetInfo_v1(&f32, &t32) == 0 && t32 == (slice > 0xffffffffull ? 0xffffffffu : slice), "legacy meminfo total %u", t32);
  CHECK(A.cuMemGetInfo_v1(NULL, NULL) == 1, "legacy NULL");
  size_t tm; unsigned tm32;
  CHECK(A.cuDeviceTotalMem(&tm, 0) == 0 && tm == slice, "total mem %zu", tm);
  CHECK(A.cuDeviceTotalMem(NULL, 0) == 1, "total mem NULL");
  CHECK(A.cuDeviceTotalMem(&tm, 7) == 101, "total mem bad device must give the driver's error");
  CHECK(A.cuDeviceTotalMem_v1(&tm32, 0) == 0 && tm32 == slice, "legacy total %u", tm32);
  /* clamp to the real free: other tenants take all but 10 MiB */
  u64 p; CHECK(A.cuMemAlloc(&p, 4 * MiB) == 0, "alloc");
  fake_set_external(0, mem - 4 * MiB - 10 * MiB);
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && f == 10 * MiB && t == slice, "clamped free %zu total %zu", f, t);
  fake_set_external(0, mem);
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && f == 0, "free with a full device %zu", f);
  fake_set_external(0, 0);
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && f == slice - 4 * MiB, "free %zu", f);
  A.cuMemFree(p);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- nvml */
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
static int t_nvml(void) {
  u64 slice = envu("GQ_SLICE", 0), used = envu("GQ_EXPECT_USED", 0), mem = envu("FAKE_CUDA_MEM_BYTES", 0);
  int expect = (int)envu("GQ_EXPECT_WRAPPED", 1);
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h, "dlopen nvml %s", dlerror());
  int (*init)(unsigned) = dlsym(h, "nvmlInitWithFlags");
  int (*count)(unsigned *) = dlsym(h, "nvmlDeviceGetCount_v2");
  int (*byidx)(unsigned, void **) = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  int (*mi2)(void *, nvmlMemory_v2_t *) = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
  int (*mi1)(void *, nvmlMemory_t *) = dlsym(h, "nvmlDeviceGetMemoryInfo");
  REQUIRE(init && count && byidx && mi2 && mi1, "nvml symbols");
  CHECK(ours((void *)mi2) == expect && ours((void *)mi1) == expect, "nvml memory info from %s", lib_of((void *)mi2));
  CHECK(!ours((void *)count), "nvmlDeviceGetCount_v2 wrapped");
  REQUIRE(init(0) == 0, "init");
  unsigned n = 0; REQUIRE(count(&n) == 0 && n >= 1, "count");
  for (unsigned i = 0; i < n; i++) {
    void *d; REQUIRE(byidx(i, &d) == 0, "handle");
    nvmlMemory_v2_t m2 = {.version = (unsigned)(sizeof(nvmlMemory_v2_t) | (2 << 24))};
    CHECK(mi2(d, &m2) == 0, "v2");
    nvmlMemory_t m1;
    CHECK(mi1(d, &m1) == 0, "v1");
    u64 want_used = i == 0 ? used : 0, want_total = expect ? slice : mem;
    if (!expect) want_used = used;
    CHECK(m2.total == want_total && m2.free == want_total - want_used && m2.used + m2.reserved + m2.free == m2.total,
          "dev %u v2 total %llu free %llu used %llu reserved %llu; want total %llu used %llu", i, m2.total, m2.free, m2.used, m2.reserved,
          (unsigned long long)want_total, (unsigned long long)want_used);
    CHECK(m1.total == want_total && m1.free == want_total - want_used && m1.used == want_used, "dev %u v1 total %llu free %llu used %llu", i, m1.total, m1.free, m1.used);
    CHECK(mi2(d, NULL) == 2 && mi1(d, NULL) == 2, "NULL must give the driver's error");
    nvmlMemory_v2_t bad = {.version = 1};
    CHECK(mi2(d, &bad) == 25, "version mismatch must give the driver's error");
  }
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- hold */
/* allocate BYTES, touch READY file, wait until STOP file exists */
static int t_hold(u64 bytes, const char *ready, const char *stop) {
  ctx_on(0);
  u64 p; CUresult r = A.cuMemAlloc(&p, bytes);
  REQUIRE(r == 0, "hold alloc %d", r);
  FILE *f = fopen(ready, "w"); if (f) fclose(f);
  for (int i = 0; i < 3000 && access(stop, F_OK) != 0; i++) usleep(10000);
  A.cuMemFree(p);
  return 0;
}

/* ---------------------------------------------------------------- race */
static volatile int stop_flag;
static unsigned long long n_ok, n_oom;
static void *race_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  u64 held[16]; size_t sz[16]; int nh = 0;
  while (!stop_flag) {
    if (nh < 16 && (rand_r(&seed) % 3)) {
      size_t n = (1 + rand_r(&seed) % 64) * MiB / 4 + (rand_r(&seed) % 4096);
      CUresult r = A.cuMemAlloc(&held[nh], n);
      if (r == 0) { sz[nh++] = n; __atomic_fetch_add(&n_ok, 1, __ATOMIC_RELAXED); }
      else if (r == 2) __atomic_fetch_add(&n_oom, 1, __ATOMIC_RELAXED);
      else { fprintf(stderr, "unexpected alloc error %d\n", r); exit(3); }
    } else if (nh > 0) {
      int i = rand_r(&seed) % nh;
      if (A.cuMemFree(held[i]) != 0) { fprintf(stderr, "free error\n"); exit(3); }
      held[i] = held[--nh]; sz[i] = sz[nh];
    }
  }
  while (nh > 0) A.cuMemFree(held[--nh]);
  return 0;
}
struct targ { void *ctx; unsigned seed; };
static void *race_thread2(void *a) { struct targ *t = a; A.cuCtxSetCurrent(t->ctx); return race_thread((void *)(uintptr_t)t->seed); }
static int t_race(double seconds, unsigned seed) {
  void *c = ctx_on(0);
  pthread_t th[3]; struct targ ta[3];
  for (int i = 0; i < 3; i++) { ta[i].ctx = c; ta[i].seed = seed * 7919 + i; pthread_create(&th[i], 0, race_thread2, &ta[i]); }
  usleep((useconds_t)(seconds * 1e6));
  stop_flag = 1;
  for (int i = 0; i < 3; i++) pthread_join(th[i], 0);
  printf("worker %d ok=%llu oom=%llu\n", getpid(), n_ok, n_oom);
  return 0;
}

/* ---------------------------------------------------------------- fill */
static int t_fill(u64 bytes, u64 chunk) {
  ctx_on(0);
  size_t f0 = info_free();
  CHECK(f0 == bytes, "a later process sees free %zu, want the whole slice %llu", f0, (unsigned long long)bytes);
  u64 ps[4096]; int n = 0;
  for (u64 done = 0; done < bytes && n < 4096; done += chunk) {
    CUresult r = A.cuMemAlloc(&ps[n], chunk);
    CHECK(r == 0, "fill alloc at %llu: %d", (unsigned long long)done, r);
    if (r) break;
    n++;
  }
  u64 extra; CHECK(A.cuMemAlloc(&extra, chunk) == 2, "fill beyond the slice not refused");
  while (n > 0) A.cuMemFree(ps[--n]);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- peak */
static int t_peak(u64 limit) {
  struct fake_stats s = stats();
  printf("peak=%llu in_use=%llu limit=%llu refused_by_driver=%llu\n", (unsigned long long)s.peak[0], (unsigned long long)s.in_use[0],
         (unsigned long long)limit, (unsigned long long)s.shared_refused);
  CHECK(s.peak[0] > 0, "no allocation recorded");
  CHECK(s.peak[0] <= limit, "driver peak %llu exceeded the slice %llu", (unsigned long long)s.peak[0], (unsigned long long)limit);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- fork */
static int t_fork(void) {
  u64 slice = envu("GQ_SLICE", 0);
  int shared = getenv("GPU_QUOTA_USAGE_FILE") != NULL;
  ctx_on(0);
  u64 p; REQUIRE(A.cuMemAlloc(&p, slice / 2) == 0, "parent alloc");
  pid_t pid = fork();
  if (pid == 0) {
    ctx_on(0);
    u64 q; CUresult r = A.cuMemAlloc(&q, slice / 4);
    if (r != 0) { fprintf(stderr, "child alloc 1/4: %d\n", r); _exit(1); }
    r = A.cuMemAlloc(&q, slice / 2);
    if (shared && r != 2) { fprintf(stderr, "child shares the budget: 1/2 more should be refused, got %d\n", r); _exit(1); }
    if (!shared && r != 0) { fprintf(stderr, "private budget: child should get its own slice, got %d\n", r); _exit(1); }
    _exit(0);
  }
  int st; waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (%d)", st);
  /* the child is gone: its usage is back */
  CHECK(A.cuMemFree(p) == 0, "parent free");
  u64 q; CHECK(A.cuMemAlloc(&q, slice) == 0, "whole slice after child exit + free");
  A.cuMemFree(q);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- ctx overhead */
static int t_ctx(void) {
  u64 slice = envu("GQ_SLICE", 0), ov = envu("GQ_OVERHEAD", 0);
  void *c = ctx_on(0);
  CHECK(info_free() == slice - ov, "after first context free %zu, want %llu", info_free(), (unsigned long long)(slice - ov));
  void *c2; CHECK(A.cuDevicePrimaryCtxRetain(&c2, 0) == 0, "retain");
  CHECK(A.cuCtxCreate_v1(&c2, 0, 0) == 0, "legacy ctx");
  CHECK(A.cuCtxCreate_v4(&c2, 0, 0, 0) == 0, "ctx v4");
  A.cuCtxSetCurrent(c);
  CHECK(info_free() == slice - ov, "overhead charged twice: free %zu", info_free());
  return failures ? 1 : 0;
}

/* a context made behind the interceptor's back (the driver's own entry
   point): its overhead is charged at the first query/allocation on it */
static int t_ctxunseen(void) {
  u64 slice = envu("GQ_SLICE", 0), ov = envu("GQ_OVERHEAD", 0);
  void *(*impl_of)(const char *, int, unsigned long long) = (void *(*)(const char *, int, unsigned long long))dlsym(cuda_h, "fake_cuda_impl_of");
  CUresult (*raw_create)(void **, unsigned, int) = (CUresult (*)(void **, unsigned, int))impl_of("cuCtxCreate", 3020, 0);
  REQUIRE(raw_create && !ours((void *)raw_create), "raw cuCtxCreate");
  void *c; int d;
  REQUIRE(A.cuInit(0) == 0 && A.cuDeviceGet(&d, 0) == 0 && raw_create(&c, 0, d) == 0, "raw context");
  CHECK(info_free() == slice - ov, "unseen context's overhead not in cuMemGetInfo: free %zu, want %llu", info_free(), (unsigned long long)(slice - ov));
  u64 p; CHECK(A.cuMemAlloc(&p, slice - ov) == 0, "the rest of the slice");
  CHECK(info_free() == 0, "charged twice? free %zu", info_free());
  A.cuMemFree(p);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- multi-device */
static int t_multidev(void) {
  u64 slice = envu("GQ_SLICE", 0);
  void *c0 = ctx_on(0);
  void *c1 = ctx_on(1);
  u64 p; CHECK(A.cuMemAlloc(&p, slice / 2) == 0, "dev1 alloc");
  CHECK(info_free() == slice / 2, "dev1 free %zu", info_free());
  A.cuCtxSetCurrent(c0);
  CHECK(info_free() == slice, "dev0 charged by a dev1 allocation: %zu", info_free());
  u64 q; CHECK(A.cuMemAlloc(&q, slice / 4 * 3) == 0, "dev0 alloc independent of dev1");
  struct prop pr = {1, 0, 1, 1, 0, 0};
  u64 vh; CHECK(A.cuMemCreate(&vh, (slice / 2) & ~((2ull << 20) - 1), &pr, 0) == 0, "cuMemCreate on dev1 (location) while dev0 current");
  CHECK(A.cuMemCreate(&vh, 4ull << 20, &pr, 0) == 2, "cuMemCreate dev1 over");
  A.cuCtxSetCurrent(c1);
  CHECK(info_free() < 4 * MiB, "dev1 after VMM %zu", info_free());
  A.cuMemFree(p); A.cuMemRelease(vh);
  A.cuCtxSetCurrent(c0); A.cuMemFree(q);
  struct fake_stats s = stats();
  CHECK(s.peak[0] <= slice && s.peak[1] <= slice, "peaks %llu %llu", (unsigned long long)s.peak[0], (unsigned long long)s.peak[1]);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- gpa details */
static int t_gpa(void) {
  REQUIRE(!strcmp(mode, "gpa"), "run with mode gpa");
  void *gq = dlopen(getenv("GQ_LIB"), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(gq, "libgpuquota not loaded");
  gpa2_t g2 = (gpa2_t)dlsym(cuda_h, "cuGetProcAddress_v2");
  CHECK(g2 == dlsym(gq, "cuGetProcAddress_v2"), "dlsym(libcuda, cuGetProcAddress_v2) is not our wrapper");
  void *p = 0; int st = -1;
  CHECK(g2("cuGetProcAddress", &p, 12000, 0, &st) == 0 && p == dlsym(gq, "cuGetProcAddress_v2") && st == 0, "self-request 12000 -> %s", lib_of(p));
  CHECK(g2("cuGetProcAddress", &p, 11030, 0, &st) == 0 && p == dlsym(gq, "cuGetProcAddress"), "self-request 11030 -> v1 wrapper");
  gpa1_t g1 = (gpa1_t)dlsym(cuda_h, "cuGetProcAddress");
  CHECK(g1 == dlsym(gq, "cuGetProcAddress"), "dlsym v1 not wrapped");
  CHECK(g1("cuGetProcAddress", &p, 12000, 0) == 0 && p == dlsym(gq, "cuGetProcAddress_v2"), "v1 self-request 12000");
  CHECK(g2("cuMemAlloc", &p, 12000, 0, &st) == 0 && p == dlsym(gq, "cuMemAlloc_v2"), "cuMemAlloc@12000 -> _v2 wrapper");
  CHECK(g2("cuMemAlloc", &p, 3000, 0, &st) == 0 && p == dlsym(gq, "cuMemAlloc"), "cuMemAlloc@3000 -> legacy wrapper");
  CHECK(g2("cuMemAllocAsync", &p, 12000, 2, &st) == 0 && p == dlsym(gq, "cuMemAllocAsync_ptsz"), "ptsz flag -> _ptsz wrapper");
  CHECK(g2("cuMemFreeAsync", &p, 12000, 2, &st) == 0 && p == dlsym(gq, "cuMemFreeAsync_ptsz"), "ptsz free");
  CHECK(g2("cuMemAllocFromPoolAsync", &p, 12000, 2, &st) == 0 && p == dlsym(gq, "cuMemAllocFromPoolAsync_ptsz"), "ptsz pool");
  CHECK(g2("cuMemAllocAsync", &p, 12000, 1, &st) == 0 && p == dlsym(gq, "cuMemAllocAsync"), "legacy stream flag");
  CHECK(g2("cuCtxCreate", &p, 12080, 0, &st) == 0 && p == dlsym(gq, "cuCtxCreate_v4"), "cuCtxCreate@12080 -> v4");
  CHECK(g2("cuCtxCreate", &p, 11040, 0, &st) == 0 && p == dlsym(gq, "cuCtxCreate_v3"), "cuCtxCreate@11040 -> v3");
  /* a variant newer than the interceptor knows is handed back untouched */
  CHECK(g2("cuMemGetInfo", &p, 99000, 0, &st) == 0 && !ours(p), "unknown newer variant wrapped (ABI mismatch risk)");
  CHECK(g2("cuMemGetInfo", &p, 13000, 0, &st) == 0 && p == dlsym(gq, "cuMemGetInfo_v2"), "cuMemGetInfo@13000 -> _v2 wrapper");
  /* symbolStatus passes through */
  st = -1; CHECK(g2("cuNoSuchSymbol", &p, 12000, 0, &st) == 500 && st == 1, "unknown symbol status %d", st);
  st = -1; CHECK(g2("cuMemAllocAsync", &p, 11000, 0, &st) == 500 && st == 2, "version-not-sufficient status %d", st);
  /* not intercepted: the driver's pointer, per flags */
  void *lk = 0, *lk2 = 0;
  CHECK(g2("cuLaunchKernel", &lk, 12000, 0, &st) == 0 && !ours(lk) && strstr(lib_of(lk), "libcuda"), "cuLaunchKernel -> %s", lib_of(lk));
  CHECK(g2("cuLaunchKernel", &lk2, 12000, 2, &st) == 0 && lk2 && lk2 != lk, "cuLaunchKernel ptsz is another real pointer");
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- msg */
static int t_msg(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  u64 p, q;
  CHECK(A.cuMemAlloc(&p, slice / 8 * 5) == 0, "alloc");
  for (int i = 0; i < 50; i++) CHECK(A.cuMemAlloc(&q, slice / 2) == 2, "refuse");
  return failures ? 1 : 0;
}


/* ---------------------------------------------------------------- issue 9: lifetimes */
static u64 phys(int dev) { return stats().in_use[dev]; }
#define PHYS_LE(dev, lim) CHECK(phys(dev) <= (lim), "device %d physically holds %llu > %llu", dev, (unsigned long long)phys(dev), (unsigned long long)(lim))

/* a failed free keeps its charge; the retry releases it */
static int t_failfree(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  u64 p; REQUIRE(A.cuMemAlloc(&p, 8 * MiB) == 0, "alloc");
  fake_fail_next_free();
  CHECK(A.cuMemFree(p) == 700, "injected free failure not returned");
  CHECK(info_free() == slice - 8 * MiB, "failed free released the charge: free %zu", info_free());
  CHECK(A.cuMemFree(p) == 0, "retry free");
  CHECK(info_free() == slice, "retried free did not release: free %zu", info_free());
  return failures ? 1 : 0;
}

/* cuMemGetInfo of this process counts the whole container; an allocation
   beyond what it reports is refused, one within it succeeds */
static int t_expect_free(u64 want) {
  ctx_on(0);
  size_t f = info_free();
  CHECK(f == want, "cuMemGetInfo free %zu, want %llu (other processes of the container must count)", f, (unsigned long long)want);
  u64 p;
  CHECK(A.cuMemAlloc(&p, want + MiB) == 2, "allocation beyond the reported free not refused");
  if (want >= MiB) { CHECK(A.cuMemAlloc(&p, want) == 0, "allocation of the reported free refused"); A.cuMemFree(p); }
  return failures ? 1 : 0;
}

/* VMM: memory lives while its handle has references or any mapping */
static int t_vmm(void) {
  u64 slice = envu("GQ_SLICE", 0), chunk = slice / 4;
  ctx_on(0);
  struct prop pr = {1, 0, 1, 0, 0, 0};
  u64 va[8], h; int n = 0;
  /* NVIDIA's sample pattern: create, map, release the handle */
  for (int i = 0; i < 8; i++) {
    REQUIRE(A.cuMemAddressReserve(&va[i], chunk, 0, 0, 0) == 0, "reserve");
    CUresult r = A.cuMemCreate(&h, chunk, &pr, 0);
    if (r != 0) { CHECK(r == 2, "create %d", r); break; }
    CHECK(A.cuMemMap(va[i], chunk, 0, h, 0) == 0, "map");
    CHECK(A.cuMemRelease(h) == 0, "release");
    n++;
    PHYS_LE(0, slice);
  }
  CHECK(n == 4, "create-map-release rounds that succeeded: %d, want 4 (slice/chunk)", n);
  CHECK(info_free() == 0, "released-but-mapped memory not counted: free %zu", info_free());
  /* unmapped one by one: the charge goes with the last mapping */
  for (int i = 0; i < n; i++) CHECK(A.cuMemUnmap(va[i], chunk) == 0, "unmap");
  CHECK(info_free() == slice, "after the last unmap: free %zu", info_free());
  CHECK(phys(0) == 0, "fake still holds %llu", (unsigned long long)phys(0));
  /* two mappings of one handle, released in between */
  u64 a, b; A.cuMemAddressReserve(&a, chunk, 0, 0, 0); A.cuMemAddressReserve(&b, chunk, 0, 0, 0);
  REQUIRE(A.cuMemCreate(&h, chunk, &pr, 0) == 0, "create");
  A.cuMemMap(a, chunk, 0, h, 0); A.cuMemMap(b, chunk, 0, h, 0); A.cuMemRelease(h);
  CHECK(A.cuMemUnmap(a, chunk) == 0 && info_free() == slice - chunk, "one mapping left: free %zu", info_free());
  CHECK(A.cuMemUnmap(b, chunk) == 0 && info_free() == slice, "no mapping left: free %zu", info_free());
  /* a retained handle is one more reference */
  REQUIRE(A.cuMemCreate(&h, chunk, &pr, 0) == 0, "create");
  A.cuMemMap(a, chunk, 0, h, 0);
  u64 h2 = 0; CHECK(A.cuMemRetainAllocationHandle(&h2, (void *)a) == 0 && h2 == h, "retain");
  A.cuMemRelease(h); A.cuMemUnmap(a, chunk);
  CHECK(info_free() == slice - chunk && phys(0) == chunk, "retained reference: free %zu phys %llu", info_free(), (unsigned long long)phys(0));
  A.cuMemRelease(h2);
  CHECK(info_free() == slice && phys(0) == 0, "after releasing the retained handle: free %zu", info_free());
  /* a contiguous run of two mappings, unmapped with one call */
  u64 c; A.cuMemAddressReserve(&c, 2 * chunk, 0, 0, 0);
  u64 h3, h4; A.cuMemCreate(&h3, chunk, &pr, 0); A.cuMemCreate(&h4, chunk, &pr, 0);
  A.cuMemMap(c, chunk, 0, h3, 0); A.cuMemMap(c + chunk, chunk, 0, h4, 0); A.cuMemRelease(h3); A.cuMemRelease(h4);
  CHECK(info_free() == slice - 2 * chunk, "two mapped: free %zu", info_free());
  CHECK(A.cuMemUnmap(c, 2 * chunk) == 0 && info_free() == slice && phys(0) == 0, "one unmap of two mappings: free %zu", info_free());
  /* exported memory: another process may hold it; the exporter keeps the charge */
  REQUIRE(A.cuMemCreate(&h, chunk, &pr, 0) == 0, "create");
  int fd = -1; CHECK(A.cuMemExportToShareableHandle(&fd, h, 1, 0) == 0, "export");
  u64 hi = 0; CHECK(A.cuMemImportFromShareableHandle(&hi, (void *)(long)fd, 1) == 0, "import");
  CHECK(info_free() == slice - chunk, "an import charged again: free %zu", info_free());
  A.cuMemRelease(hi); A.cuMemRelease(h);
  CHECK(info_free() == slice - chunk, "exported memory released while another process may hold it: free %zu", info_free());
  PHYS_LE(0, slice);
  return failures ? 1 : 0;
}

#define ATTR_RELEASE_THRESHOLD 4
#define ATTR_RESERVED_MEM_CURRENT 5
/* stream-ordered pools are charged for what they reserve */
static int t_pool(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  void *pool; REQUIRE(A.cuDeviceGetDefaultMemPool(&pool, 0) == 0, "default pool");
  u64 max = ~0ull; REQUIRE(A.cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, &max) == 0, "threshold");
  /* PyTorch's cudaMallocAsync backend: 3/4 of the slice, freed, synchronized: the pool keeps it */
  u64 p; REQUIRE(A.cuMemAllocAsync(&p, slice / 4 * 3, 0) == 0, "async alloc");
  CHECK(A.cuMemFreeAsync(p, 0) == 0 && A.cuStreamSynchronize(0) == 0, "free+sync");
  u64 res = 0; A.cuMemPoolGetAttribute(pool, ATTR_RESERVED_MEM_CURRENT, &res);
  CHECK(res == slice / 4 * 3, "fake pool keeps %llu", (unsigned long long)res);
  CHECK(info_free() == slice / 4, "retained pool memory not charged: free %zu", info_free());
  u64 q; CHECK(A.cuMemAlloc(&q, slice / 2) == 2, "CuPy-like cuMemAlloc of 1/2 slice next to a 3/4 pool not refused");
  PHYS_LE(0, slice);
  /* reuse from the reserve costs nothing more */
  CHECK(A.cuMemAllocAsync(&p, slice / 2, 0) == 0, "alloc from the reserve");
  CHECK(info_free() == slice / 4, "allocation from the reserve charged again: free %zu", info_free());
  A.cuMemFreeAsync(p, 0);
  /* trimming gives it back */
  CHECK(A.cuMemPoolTrimTo(pool, 0) == 0, "trim");
  CHECK(info_free() == slice, "after trim: free %zu", info_free());
  CHECK(A.cuMemAlloc(&q, slice / 2) == 0, "cuMemAlloc after trim"); A.cuMemFree(q);
  /* threshold 0: a sync gives it back */
  u64 zero = 0; A.cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, &zero);
  REQUIRE(A.cuMemAllocAsync(&p, slice / 2, 0) == 0, "async alloc");
  A.cuMemFreeAsync(p, 0);
  CHECK(info_free() == slice / 2, "before the sync the pool still holds it: free %zu", info_free());
  A.cuStreamSynchronize(0);
  CHECK(info_free() == slice, "after the sync (threshold 0): free %zu", info_free());
  /* a created pool, destroyed */
  struct { int at, ht, lt, lid; void *w; size_t max; unsigned short u; unsigned char r[54]; } pp = {1, 0, 1, 0, 0, 0, 0, {0}};
  void *mp; REQUIRE(A.cuMemPoolCreate(&mp, &pp) == 0, "pool create");
  A.cuMemPoolSetAttribute(mp, ATTR_RELEASE_THRESHOLD, &max);
  REQUIRE(A.cuMemAllocFromPoolAsync(&p, slice / 4, mp, 0) == 0, "from pool");
  A.cuMemFreeAsync(p, 0); A.cuStreamSynchronize(0);
  CHECK(info_free() == slice / 4 * 3, "created pool keeps it: free %zu", info_free());
  CHECK(A.cuMemPoolDestroy(mp) == 0 && info_free() == slice, "after destroy: free %zu", info_free());
  /* cuMemAllocAsync uses the device's current pool (cuDeviceSetMemPool) */
  void *mp2; REQUIRE(A.cuMemPoolCreate(&mp2, &pp) == 0, "pool create");
  A.cuMemPoolSetAttribute(mp2, ATTR_RELEASE_THRESHOLD, &max);
  REQUIRE(A.cuMemAllocAsync(&p, slice / 8, 0) == 0, "async alloc (default pool)");
  A.cuMemFreeAsync(p, 0);
  CHECK(A.cuDeviceSetMemPool(0, mp2) == 0, "set mem pool");
  REQUIRE(A.cuMemAllocAsync(&p, slice / 2, 0) == 0, "async alloc (current pool)");
  A.cuMemFreeAsync(p, 0); A.cuStreamSynchronize(0);
  A.cuMemPoolTrimTo(pool, 0);
  CHECK(info_free() == slice / 2, "the current pool's reserve attributed to the default pool: free %zu", info_free());
  A.cuMemPoolTrimTo(mp2, 0);
  CHECK(info_free() == slice, "after trimming the current pool: free %zu", info_free());
  A.cuDeviceSetMemPool(0, pool); A.cuMemPoolDestroy(mp2);
  /* before refusing, the interceptor asks the driver what its pools still
     reserve: here the pool is trimmed behind its back (the driver's own
     entry point, not the wrapper) */
  A.cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, &max);
  REQUIRE(A.cuMemAllocAsync(&p, slice / 2, 0) == 0, "async alloc");
  A.cuMemFreeAsync(p, 0); A.cuStreamSynchronize(0);
  CHECK(info_free() == slice / 2, "retained: free %zu", info_free());
  void *(*impl_of)(const char *, int, unsigned long long) = (void *(*)(const char *, int, unsigned long long))dlsym(cuda_h, "fake_cuda_impl_of");
  CUresult (*raw_trim)(void *, size_t) = (CUresult (*)(void *, size_t))impl_of("cuMemPoolTrimTo", 12000, 0);
  REQUIRE(raw_trim && !ours((void *)raw_trim), "raw trim");
  CHECK(raw_trim(pool, 0) == 0, "raw trim");
  CHECK(A.cuMemAlloc(&q, slice / 4 * 3) == 0, "allocation refused although the pool gave its memory back"); A.cuMemFree(q);
  PHYS_LE(0, slice);
  return failures ? 1 : 0;
}

/* the device of a stream-ordered allocation: the stream's, or the pool's */
static int t_pooldev(void) {
  u64 slice = envu("GQ_SLICE", 0);
  void *c0 = ctx_on(0);
  void *c1 = ctx_on(1);
  void *s1; REQUIRE(A.cuStreamCreate(&s1, 0) == 0, "stream on dev 1");
  A.cuCtxSetCurrent(c0);
  u64 p; REQUIRE(A.cuMemAllocAsync(&p, slice / 4 * 3, s1) == 0, "alloc on the dev-1 stream");
  CHECK(info_free() == slice, "a dev-1 stream's allocation charged to the current device 0: free %zu", info_free());
  CHECK(A.cuMemAllocAsync(&p, slice / 2, s1) == 2, "dev 1 over its slice not refused");
  struct { int at, ht, lt, lid; void *w; size_t max; unsigned short u; unsigned char r[54]; } pp = {1, 0, 1, 1, 0, 0, 0, {0}};
  void *mp; REQUIRE(A.cuMemPoolCreate(&mp, &pp) == 0, "pool on dev 1");
  CHECK(A.cuMemAllocFromPoolAsync(&p, slice / 2, mp, 0) == 2, "dev-1 pool allocation charged to device 0 (not refused)");
  u64 q; CHECK(A.cuMemAlloc(&q, slice / 4 * 3) == 0, "device 0 keeps its slice");
  A.cuCtxSetCurrent(c1);
  PHYS_LE(1, slice);
  PHYS_LE(0, slice);
  return failures ? 1 : 0;
}

/* frees the driver does on its own: context destroy, primary reset/release */
static int t_ctxlife(void) {
  u64 slice = envu("GQ_SLICE", 0);
  REQUIRE(A.cuInit(0) == 0, "init");
  void *pc; REQUIRE(A.cuDevicePrimaryCtxRetain(&pc, 0) == 0, "retain");
  A.cuCtxSetCurrent(pc);
  u64 p; REQUIRE(A.cuMemAlloc(&p, slice / 4 * 3) == 0, "alloc 3/4");
  u64 m; REQUIRE(A.cuMemAllocManaged(&m, slice / 8, 1) == 0, "managed 1/8");
  CHECK(A.cuDevicePrimaryCtxReset(0) == 0, "reset");
  REQUIRE(A.cuDevicePrimaryCtxRetain(&pc, 0) == 0, "retain again");
  A.cuCtxSetCurrent(pc);
  CHECK(info_free() == slice, "after the reset: free %zu", info_free());
  CHECK(A.cuMemAlloc(&p, slice / 4 * 3) == 0, "3/4 again after the reset refused");
  PHYS_LE(0, slice);
  /* the last release destroys the primary context */
  CHECK(A.cuDevicePrimaryCtxRelease(0) == 0, "release");
  REQUIRE(A.cuDevicePrimaryCtxRetain(&pc, 0) == 0, "retain again");
  A.cuCtxSetCurrent(pc);
  CHECK(info_free() == slice, "after the last primary release: free %zu", info_free());
  /* a created context, destroyed */
  void *c; REQUIRE(A.cuCtxCreate(&c, 0, 0) == 0, "create");
  REQUIRE(A.cuMemAlloc(&p, slice / 2) == 0, "alloc in ctx");
  u64 keep; REQUIRE(A.cuCtxSetCurrent(pc) == 0 && A.cuMemAlloc(&keep, slice / 4) == 0, "alloc in the primary");
  CHECK(A.cuCtxDestroy(c) == 0, "destroy");
  CHECK(info_free() == slice / 4 * 3, "after destroy (the other context keeps 1/4): free %zu", info_free());
  A.cuMemFree(keep);
  /* the device malloc heap */
  CHECK(A.cuCtxSetLimit(2, (8 << 20) + slice / 4) == 0, "heap limit");
  CHECK(info_free() == slice / 4 * 3, "malloc heap not charged: free %zu", info_free());
  CHECK(A.cuCtxSetLimit(2, (8 << 20) + slice * 2) == 2, "heap beyond the slice not refused");
  CHECK(A.cuCtxSetLimit(2, 8 << 20) == 0 && info_free() == slice, "heap back to the default: free %zu", info_free());
  /* thread stacks: local memory for every resident thread (fake: 4 SMs x 64 threads) */
  u64 per = slice / 2 / 256;
  CHECK(A.cuCtxSetLimit(0, 1024 + per) == 0, "stack limit");
  CHECK(info_free() == slice / 2, "stack (local memory) not charged: free %zu", info_free());
  PHYS_LE(0, slice);
  CHECK(A.cuCtxSetLimit(0, 1024 + slice / 128) == 2, "stack beyond the slice not refused");
  CHECK(A.cuCtxSetLimit(0, 1024) == 0 && info_free() == slice, "stack back to the default: free %zu", info_free());
  PHYS_LE(0, slice);
  return failures ? 1 : 0;
}

/* graph memory: the device's graph pool reserve is charged from the first
   synchronisation after a launch until cuDeviceGraphMemTrim */
static int t_graphmem(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  CUresult (*gcreate)(void **, unsigned) = dlsym(cuda_h, "cuGraphCreate");
  CUresult (*glaunch)(void *, void *) = dlsym(cuda_h, "cuGraphLaunch");
  REQUIRE(gcreate && glaunch, "graph symbols");
  void *g; REQUIRE(gcreate(&g, 0) == 0, "graph create");
  unsigned char params[120]; memset(params, 0, sizeof params);
  *(int *)(params + 8) = 1; *(int *)(params + 12) = 0; *(size_t *)(params + 104) = slice / 2;
  void *node; REQUIRE(A.cuGraphAddMemAllocNode(&node, g, 0, 0, params) == 0, "mem node");
  void *ex; REQUIRE(A.cuGraphInstantiateWithFlags(&ex, g, 0) == 0, "instantiate");
  REQUIRE(glaunch(ex, 0) == 0, "launch");
  CHECK(A.cuStreamSynchronize(0) == 0, "sync");
  CHECK(info_free() == slice / 2, "graph pool reserve not charged: free %zu", info_free());
  u64 p; CHECK(A.cuMemAlloc(&p, slice / 4 * 3) == 2, "allocation next to the graph reserve not refused");
  PHYS_LE(0, slice);
  CHECK(A.cuMemFree(*(u64 *)(params + 112)) == 0, "free of the node's allocation");
  CHECK(A.cuDeviceGraphMemTrim(0) == 0, "trim");
  CHECK(info_free() == slice, "after cuDeviceGraphMemTrim: free %zu", info_free());
  return failures ? 1 : 0;
}


/* ---------------------------------------------------------------- capture (issue 17) */
/* entry points the api table does not carry, through the same path as the rest */
static void *fnp(const char *exported, const char *base, int ver) {
  if (!strncmp(mode, "gpa", 3)) return gpa_get(base, ver, !strcmp(mode, "gpa_ptsz") ? 2 : 0);
  if (!strcmp(mode, "direct")) return dlsym(RTLD_DEFAULT, exported);
  return dlsym(cuda_h, exported);
}
#define CAP_GLOBAL 0
#define CAP_RELAXED 2
typedef CUresult (*begin_t)(void *, int);
typedef CUresult (*end_t)(void *, void **);
typedef CUresult (*iscap_t)(void *, int *);
typedef CUresult (*launch_t)(void *, void *);
typedef CUresult (*xmode_t)(int *);
struct capfns { begin_t begin; end_t end; iscap_t iscap; launch_t launch; xmode_t xmode; };
static struct capfns capfns(void) {
  struct capfns c;
  c.begin = (begin_t)fnp("cuStreamBeginCapture_v2", "cuStreamBeginCapture", 12000);
  c.end = (end_t)fnp("cuStreamEndCapture", "cuStreamEndCapture", 12000);
  c.iscap = (iscap_t)fnp("cuStreamIsCapturing", "cuStreamIsCapturing", 12000);
  c.launch = (launch_t)fnp("cuGraphLaunch", "cuGraphLaunch", 12000);
  c.xmode = (xmode_t)fnp("cuThreadExchangeStreamCaptureMode", "cuThreadExchangeStreamCaptureMode", 12000);
  REQUIRE(c.begin && c.end && c.iscap && c.launch && c.xmode, "capture entry points");
  return c;
}
static u64 violations(void) {
  unsigned long long (*v)(void) = (unsigned long long (*)(void))dlsym(cuda_h, "fake_cuda_capture_violations");
  REQUIRE(v, "fake_cuda_capture_violations");
  return v();
}

/* The fake models the driver's capture rules: these must fail (run natively,
   without the interceptor, they show the model can catch a violation). */
struct xarg { void *ctx; int relaxed; CUresult r; };
static void *other_thread_alloc(void *a) {
  struct xarg *x = a; A.cuCtxSetCurrent(x->ctx);
  struct capfns c = capfns();
  if (x->relaxed) { int m = CAP_RELAXED; c.xmode(&m); }
  u64 p; x->r = A.cuMemAlloc(&p, MiB); if (x->r == 0) A.cuMemFree(p);
  return 0;
}
static int t_capturectl(void) {
  void *ctx = ctx_on(0);
  struct capfns c = capfns();
  void *s; REQUIRE(A.cuStreamCreate(&s, 0) == 0, "stream");
  void *pool; REQUIRE(A.cuDeviceGetDefaultMemPool(&pool, 0) == 0, "pool");
  void *g; int st; u64 v;
  /* 1. a legal capture */
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  CHECK(c.iscap(s, &st) == 0 && st == 1, "capturing status %d", st);
  u64 p; CHECK(A.cuMemAllocAsync(&p, MiB, s) == 0 && A.cuMemFreeAsync(p, s) == 0, "node alloc/free");
  CHECK(c.end(s, &g) == 0 && g, "legal capture ended");
  CHECK(c.iscap(s, &st) == 0 && st == 0, "status after end %d", st);
  /* 2. a pool attribute query during a global capture breaks it */
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  CHECK(A.cuMemPoolGetAttribute(pool, ATTR_RESERVED_MEM_CURRENT, &v) == 900, "pool query during capture allowed");
  CHECK(c.iscap(s, &st) == 0 && st == 2, "not invalidated: %d", st);
  CHECK(c.end(s, &g) == 901 && !g, "end of a broken capture did not fail");
  /* 3. synchronising the capturing stream */
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  CHECK(A.cuStreamSynchronize(s) == 900, "sync of the capturing stream allowed");
  CHECK(c.end(s, &g) == 901, "sync did not invalidate");
  /* 4. cuMemGetInfo / cuCtxSynchronize */
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  size_t f, t; CHECK(A.cuMemGetInfo(&f, &t) == 900, "cuMemGetInfo during capture allowed");
  CHECK(c.end(s, &g) == 901, "meminfo did not invalidate");
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  CHECK(A.cuCtxSynchronize() == 900, "cuCtxSynchronize during capture allowed");
  CHECK(c.end(s, &g) == 901, "ctx sync did not invalidate");
  /* 5. global mode: another thread's unsafe call breaks it, unless that thread is relaxed */
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  pthread_t th; struct xarg x = {ctx, 0, 0};
  pthread_create(&th, 0, other_thread_alloc, &x); pthread_join(th, 0);
  CHECK(x.r == 900, "another thread's cuMemAlloc during a global capture: %d", x.r);
  CHECK(c.end(s, &g) == 901, "other thread did not invalidate");
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin");
  struct xarg y = {ctx, 1, 0};
  pthread_create(&th, 0, other_thread_alloc, &y); pthread_join(th, 0);
  CHECK(y.r == 0, "a relaxed thread's cuMemAlloc refused: %d", y.r);
  CHECK(c.end(s, &g) == 0, "relaxed thread broke the capture");
  /* 6. a relaxed capture allows the query */
  REQUIRE(c.begin(s, CAP_RELAXED) == 0, "begin relaxed");
  CHECK(A.cuMemPoolGetAttribute(pool, ATTR_RESERVED_MEM_CURRENT, &v) == 0, "query in relaxed capture");
  CHECK(c.end(s, &g) == 0, "relaxed capture");
  return failures ? 1 : 0;
}

/* PyTorch's cudaMallocAsync backend under torch.cuda.graph: warm-up on a
   side stream, then a capture that allocates and frees from the pool. The
   capture must end; the graph's memory is charged from its launch, another
   allocator is refused next to it, a trim gives it back. GQ_NATIVE=1: no
   slice (the same program without the interceptor). */
static int t_capture(void) {
  u64 slice = envu("GQ_SLICE", 0);
  int native = envu("GQ_NATIVE", 0) != 0;
  if (native) slice = 256 * MiB;
  ctx_on(0);
  struct capfns c = capfns();
  void *s; REQUIRE(A.cuStreamCreate(&s, 0) == 0, "side stream");
  void *pool; REQUIRE(A.cuDeviceGetDefaultMemPool(&pool, 0) == 0, "pool");
  u64 max = ~0ull; A.cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, &max);
  /* three warm-up iterations, not synchronised (the pool is freed into) */
  for (int i = 0; i < 3; i++) {
    u64 w; REQUIRE(A.cuMemAllocAsync(&w, slice / 16, s) == 0, "warm-up alloc");
    REQUIRE(A.cuMemFreeAsync(w, s) == 0, "warm-up free");
  }
  u64 before = violations();
  void *g = 0;
  void *s2; REQUIRE(A.cuStreamCreate(&s2, 0) == 0, "second stream");
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin capture");
  u64 a, b, o;
  /* work on another stream during the capture (legal): the pool grows */
  CHECK(A.cuMemAllocAsync(&o, slice / 8, s2) == 0, "allocation on a non-capturing stream during the capture");
  CHECK(A.cuMemAllocAsync(&a, slice / 8, s) == 0, "captured allocation");
  CHECK(A.cuMemAllocAsync(&b, slice / 4, s) == 0, "captured allocation above the pool's reserve");
  CHECK(A.cuMemFreeAsync(b, s) == 0, "captured free");
  CHECK(A.cuMemFreeAsync(a, s) == 0, "captured free");
  CUresult r = c.end(s, &g);
  CHECK(r == 0 && g, "capture with pool allocations ended with %d (the interceptor made %llu call(s) illegal during capture)", r, (unsigned long long)(violations() - before));
  if (r != 0) return 1;
  CHECK(A.cuMemFreeAsync(o, s2) == 0, "free on the other stream");
  void *ex; REQUIRE(A.cuGraphInstantiateWithFlags(&ex, g, 0) == 0, "instantiate");
  for (int i = 0; i < 3; i++) CHECK(c.launch(ex, s) == 0, "replay %d", i);
  CHECK(A.cuStreamSynchronize(s) == 0, "sync");
  CHECK(violations() == before, "illegal calls during the capture");
  if (native) return failures ? 1 : 0;
  A.cuMemPoolTrimTo(pool, 0);
  CHECK(A.cuDeviceGraphMemTrim(0) == 0, "graph trim");
  CHECK(info_free() == slice, "after the graph freed everything and was trimmed: free %zu of %llu", info_free(), (unsigned long long)slice);

  /* issue 17 §2: 3/4 of the slice captured and kept by the graph, then another
     allocator asks 1/2 of it: refused, right after the launch */
  void *g2 = 0; u64 keep;
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin capture 2");
  CHECK(A.cuMemAllocAsync(&keep, slice / 4 * 3, s) == 0, "captured 3/4 allocation");
  CHECK(c.end(s, &g2) == 0 && g2, "capture 2");
  void *ex2; REQUIRE(A.cuGraphInstantiateWithFlags(&ex2, g2, 0) == 0, "instantiate 2");
  CHECK(c.launch(ex2, s) == 0, "launch 2");
  u64 q; CHECK(A.cuMemAlloc(&q, slice / 2) == 2, "1/2 slice allocated next to a kept 3/4 graph allocation");
  PHYS_LE(0, slice);
  CHECK(info_free() <= slice / 4, "graph allocation not charged after launch: free %zu", info_free());
  /* freed by the program and trimmed: given back */
  CHECK(A.cuMemFree(keep) == 0, "free of the graph allocation");
  CHECK(A.cuDeviceGraphMemTrim(0) == 0, "trim 2");
  CHECK(info_free() == slice, "after free + trim: free %zu", info_free());
  CHECK(A.cuMemAlloc(&q, slice / 2) == 0, "1/2 slice after the graph memory went"); A.cuMemFree(q);
  /* a capture that asks more than the slice in total is refused at its nodes */
  void *g3 = 0; u64 n1, n2;
  REQUIRE(c.begin(s, CAP_GLOBAL) == 0, "begin capture 3");
  CHECK(A.cuMemAllocAsync(&n1, slice / 4 * 3, s) == 0, "captured 3/4");
  CHECK(A.cuMemAllocAsync(&n2, slice / 2, s) == 2, "a capture's nodes beyond the slice in total not refused");
  r = c.end(s, &g3);
  CHECK(violations() == before, "illegal calls during the capture");
  return failures ? 1 : 0;
}

/* exec: the same pid and start time, a new image: the old charge goes */
static int t_execself(const char *self, u64 bytes) {
  ctx_on(0);
  u64 p; REQUIRE(A.cuMemAlloc(&p, bytes) == 0, "alloc before exec");
  char s1[32], s2[32]; snprintf(s1, sizeof s1, "%llu", (unsigned long long)envu("GQ_SLICE", 0)); snprintf(s2, sizeof s2, "%llu", (unsigned long long)(8 * MiB));
  execl(self, self, "fill", s1, s2, (char *)0);
  fprintf(stderr, "exec failed\n");
  return 1;
}

/* a zombie holds no memory: its charge goes whoever reaps it (here: later) */
static int t_zombie(u64 bytes) {
  u64 slice = envu("GQ_SLICE", 0);
  pid_t pid = fork();
  if (pid == 0) {
    ctx_on(0);
    u64 p; if (A.cuMemAlloc(&p, bytes) != 0) _exit(1);
    _exit(0); /* exits holding it */
  }
  char path[64], buf[512]; snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int z = 0;
  for (int i = 0; i < 500 && !z; i++) {
    FILE *f = fopen(path, "r"); if (f) { size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = 0; fclose(f); char *c = strrchr(buf, ')'); z = c && c[2] == 'Z'; }
    if (!z) usleep(10000);
  }
  REQUIRE(z, "child did not become a zombie");
  int r = t_fill(slice, 8 * MiB);
  int st; waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
  return r | (failures ? 1 : 0);
}

/* a fork() while another thread is in the very first initialisation */
static void *forkinit_thread(void *h) { dlsym(h, "cuMemGetInfo_v2"); return 0; }
static int t_forkinit(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h, "dlopen");
  pthread_t th; pthread_create(&th, 0, forkinit_thread, h);
  usleep(300000); /* the thread now blocks reading the limits FIFO, mid-initialisation */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(8);
    void *f = dlsym(h, "cuMemAlloc_v2"); /* must not spin on the parent's initialisation */
    _exit(f ? 0 : 3);
  }
  int st; waitpid(pid, &st, 0);
  pthread_join(th, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child of a fork during the first initialisation: status %d (killed by SIGALRM = spun)", st);
  return failures ? 1 : 0;
}

/* everything refused (broken limits file: fail closed) */
static int t_refuse(void) {
  ctx_on(0);
  u64 p; CUresult r = A.cuMemAlloc(&p, MiB);
  CHECK(r == 2, "alloc with a broken limits file returned %d, want 2", r);
  CHECK(info_free() == 0, "cuMemGetInfo reports %zu free although nothing can be allocated", info_free());
  struct prop pr = {1, 0, 1, 0, 0, 0};
  u64 h; CHECK(A.cuMemCreate(&h, 2 * MiB, &pr, 0) == 2, "cuMemCreate not refused");
  CHECK(A.cuMemAllocAsync(&p, MiB, 0) == 2, "cuMemAllocAsync not refused");
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- issue 13: peer access */
/* One rank of an NCCL-style job: with its current context on device RANK it
   creates VMM memory on device 1, maps it and grants devices 0 and 1 access
   (cuMemSetAccess), as NCCL does for its peer buffers. The container's
   charge on device 1 must then be GQ_EXPECT1 (this rank's chunk plus what
   ranks started before hold), on device 0 nothing, in the interceptor's
   view and physically. GQ_OVER=1: then fill device 1 past the slice (the
   refusal is the driver's OOM) while device 0 still allocates. After STOP
   appears: unmap, and the charge goes. */
struct access_desc { int loc_type, loc_id; unsigned flags; };
static size_t free_on(void *ctx) { A.cuCtxSetCurrent(ctx); return info_free(); }
static int t_peer(int rank, const char *ready, const char *stop) {
  u64 slice = envu("GQ_SLICE", 0), chunk = envu("GQ_CHUNK", slice / 4), want1 = envu("GQ_EXPECT1", chunk);
  REQUIRE(slice && chunk % (2 * MiB) == 0 && want1 >= chunk && want1 <= slice, "GQ_SLICE/GQ_CHUNK/GQ_EXPECT1");
  REQUIRE(A.cuMemSetAccess && A.cuMemGetAccess, "no cuMemSetAccess in this path");
  void *mine = ctx_on(rank);
  struct prop pr = {1, 0, 1, 1, 0, 0};
  u64 h, va;
  CUresult r = A.cuMemCreate(&h, chunk, &pr, 0);
  REQUIRE(r == 0, "rank %d: cuMemCreate on device 1: %d", rank, r);
  REQUIRE(A.cuMemAddressReserve(&va, chunk, 0, 0, 0) == 0, "reserve");
  REQUIRE(A.cuMemMap(va, chunk, 0, h, 0) == 0, "map");
  struct access_desc acc[2] = {{1, 0, 3}, {1, 1, 3}};
  CHECK((r = A.cuMemSetAccess(va, chunk, acc, 2)) == 0, "cuMemSetAccess for devices 0 and 1: %d", r);
  u64 fl = 0; CHECK(A.cuMemGetAccess(&fl, &acc[0], va) == 0 && fl == 3, "peer access of device 0: %llu", fl);
  CHECK(A.cuMemRelease(h) == 0, "release (the mapping keeps it)");
  void *other = ctx_on(1 - rank);
  void *c0 = rank == 0 ? mine : other, *c1 = rank == 0 ? other : mine;
  A.cuCtxSetCurrent(mine);
  CHECK(phys(1) == want1, "device 1 physically holds %llu, want %llu", (unsigned long long)phys(1), (unsigned long long)want1);
  CHECK(phys(0) == 0, "device 0 physically holds %llu, want 0", (unsigned long long)phys(0));
  size_t f1 = free_on(c1), f0 = free_on(c0);
  CHECK(f1 == slice - want1, "GPU 1 free %zu, want %llu (peer buffer charged once, to GPU 1)", f1, (unsigned long long)(slice - want1));
  CHECK(f0 == slice, "GPU 0 free %zu, want %llu (a peer mapping charged to GPU 0)", f0, (unsigned long long)slice);
  if (envu("GQ_OVER", 0)) {
    A.cuCtxSetCurrent(mine);
    u64 fill[64]; int n = 0; u64 step = 2 * MiB;
    while (n < 64 && (r = A.cuMemCreate(&fill[n], step, &pr, 0)) == 0) n++;
    CHECK(r == 2, "over the slice on GPU 1: %d, want CUDA_ERROR_OUT_OF_MEMORY", r);
    CHECK((u64)n * step == slice - want1, "GPU 1 admitted %llu more, want %llu", (unsigned long long)(n * step), (unsigned long long)(slice - want1));
    CHECK(phys(1) <= slice, "device 1 physically holds %llu > slice", (unsigned long long)phys(1));
    /* the other GPU is unaffected */
    A.cuCtxSetCurrent(c0);
    u64 p; CHECK((r = A.cuMemAlloc(&p, slice / 2)) == 0, "cuMemAlloc on GPU 0 with GPU 1 full: %d", r);
    struct prop p0 = {1, 0, 1, 0, 0, 0}; u64 h0;
    CHECK((r = A.cuMemCreate(&h0, chunk, &p0, 0)) == 0, "cuMemCreate on GPU 0 with GPU 1 full: %d", r);
    if (r == 0) A.cuMemRelease(h0);
    A.cuMemFree(p);
    for (int i = 0; i < n; i++) A.cuMemRelease(fill[i]);
    CHECK(free_on(c1) == slice - want1, "GPU 1 after releasing the fill: %zu", free_on(c1));
    CHECK(free_on(c0) == slice && phys(0) == 0, "GPU 0 after its frees: %zu", free_on(c0));
  }
  A.cuCtxSetCurrent(mine);
  if (ready) { FILE *f = fopen(ready, "w"); if (f) fclose(f); }
  for (int i = 0; stop && i < 2000 && access(stop, F_OK) != 0; i++) usleep(10000);
  CHECK(A.cuMemUnmap(va, chunk) == 0, "unmap");
  CHECK(phys(1) == want1 - chunk, "after unmap device 1 physically holds %llu, want %llu", (unsigned long long)phys(1), (unsigned long long)(want1 - chunk));
  CHECK(free_on(c1) == slice - (want1 - chunk), "after unmap GPU 1 free %zu", free_on(c1));
  CHECK(free_on(c0) == slice, "after unmap GPU 0 free %zu", free_on(c0));
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- foreign GPU (issue 19) */
/* A container whose slice is GPU 1 alone (limits gpus=GPU 1's UUID) sees two
   GPUs: GPU 0 is not part of its slice and gets nothing — allocations are
   refused, cuMemGetInfo/cuDeviceTotalMem/NVML report 0 for it — while GPU 1
   keeps its slice. GQ_OWN0=1 (both GPUs in the slice): the negative control,
   GPU 0 allocates and reports the slice. */
static int t_foreign(void) {
  u64 slice = envu("GQ_SLICE", 0), own0 = envu("GQ_OWN0", 0), want0 = own0 ? slice : 0;
  REQUIRE(slice, "GQ_SLICE");
  void *c1 = ctx_on(1);
  u64 p; CUresult r;
  CHECK((r = A.cuMemAlloc(&p, slice / 2)) == 0, "cuMemAlloc on GPU 1 (the slice): %d", r);
  size_t f = 0, t = 0;
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && t == slice && f == slice / 2, "GPU 1 meminfo total %zu free %zu", t, f);
  void *c0 = ctx_on(0);
  u64 q = 0;
  r = A.cuMemAlloc(&q, MiB);
  CHECK(r == (own0 ? 0 : 2), "cuMemAlloc of 1 MiB on GPU 0: %d, want %d", r, own0 ? 0 : 2);
  if (r == 0) A.cuMemFree(q);
  f = t = 1;
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && t == want0 && f == want0, "GPU 0 meminfo total %zu free %zu, want %llu", t, f, (unsigned long long)want0);
  unsigned f32 = 1, t32 = 1;
  CHECK(A.cuMemGetInfo_v1(&f32, &t32) == 0 && t32 == want0 && f32 == want0, "GPU 0 legacy meminfo total %u free %u", t32, f32);
  size_t tm = 1;
  CHECK(A.cuDeviceTotalMem(&tm, 0) == 0 && tm == want0, "cuDeviceTotalMem(GPU 0) %zu, want %llu", tm, (unsigned long long)want0);
  CHECK(A.cuDeviceTotalMem(&tm, 1) == 0 && tm == slice, "cuDeviceTotalMem(GPU 1) %zu", tm);
  /* VMM on GPU 0 from a GPU 1 context, and a stream-ordered allocation */
  A.cuCtxSetCurrent(c1);
  struct prop p0 = {1, 0, 1, 0, 0, 0}; u64 h;
  r = A.cuMemCreate(&h, 2 * MiB, &p0, 0);
  CHECK(r == (own0 ? 0 : 2), "cuMemCreate on GPU 0 from GPU 1's context: %d", r);
  if (r == 0) A.cuMemRelease(h);
  A.cuCtxSetCurrent(c0);
  r = A.cuMemAllocManaged(&q, MiB, 1);
  CHECK(r == (own0 ? 0 : 2), "cuMemAllocManaged on GPU 0: %d", r);
  if (r == 0) A.cuMemFree(q);
  if (!own0) CHECK(phys(0) == 0, "GPU 0 physically holds %llu", (unsigned long long)phys(0));
  /* NVML: the GPU outside the slice reports 0 */
  void *nh = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(nh, "dlopen nvml %s", dlerror());
  int (*init)(unsigned) = dlsym(nh, "nvmlInitWithFlags");
  int (*byidx)(unsigned, void **) = dlsym(nh, "nvmlDeviceGetHandleByIndex_v2");
  int (*mi2)(void *, nvmlMemory_v2_t *) = dlsym(nh, "nvmlDeviceGetMemoryInfo_v2");
  int (*mi1)(void *, nvmlMemory_t *) = dlsym(nh, "nvmlDeviceGetMemoryInfo");
  REQUIRE(init && byidx && mi2 && mi1 && init(0) == 0, "nvml");
  for (unsigned i = 0; i < 2; i++) {
    void *d; REQUIRE(byidx(i, &d) == 0, "handle %u", i);
    u64 want = i == 0 ? want0 : slice;
    nvmlMemory_t m1; nvmlMemory_v2_t m2 = {.version = (unsigned)(sizeof(nvmlMemory_v2_t) | (2 << 24))};
    CHECK(mi1(d, &m1) == 0 && m1.total == want && m1.free <= want, "NVML GPU %u total %llu free %llu, want total %llu", i, m1.total, m1.free, (unsigned long long)want);
    CHECK(mi2(d, &m2) == 0 && m2.total == want && m2.free <= want, "NVML v2 GPU %u total %llu free %llu", i, m2.total, m2.free);
  }
  A.cuCtxSetCurrent(c1);
  A.cuMemFree(p);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: gqtest CMD [args]\n"); return 2; }
  const char *cmd = argv[1];
  if (getenv("GQ_MODE")) mode = getenv("GQ_MODE");
  if (!strcmp(cmd, "forkinit")) return t_forkinit();
  resolve();
  if (!strcmp(cmd, "paths")) return t_paths();
  if (!strcmp(cmd, "apis")) return t_apis();
  if (!strcmp(cmd, "frees")) return t_frees();
  if (!strcmp(cmd, "meminfo")) return t_meminfo();
  if (!strcmp(cmd, "nvml")) return t_nvml();
  if (!strcmp(cmd, "hold") && argc >= 5) return t_hold(strtoull(argv[2], 0, 0), argv[3], argv[4]);
  if (!strcmp(cmd, "race") && argc >= 4) return t_race(atof(argv[2]), (unsigned)atoi(argv[3]));
  if (!strcmp(cmd, "fill") && argc >= 4) return t_fill(strtoull(argv[2], 0, 0), strtoull(argv[3], 0, 0));
  if (!strcmp(cmd, "peak") && argc >= 3) return t_peak(strtoull(argv[2], 0, 0));
  if (!strcmp(cmd, "fork")) return t_fork();
  if (!strcmp(cmd, "ctx")) return t_ctx();
  if (!strcmp(cmd, "ctxunseen")) return t_ctxunseen();
  if (!strcmp(cmd, "multidev")) return t_multidev();
  if (!strcmp(cmd, "gpa")) return t_gpa();
  if (!strcmp(cmd, "msg")) return t_msg();
  if (!strcmp(cmd, "refuse")) return t_refuse();
  if (!strcmp(cmd, "failfree")) return t_failfree();
  if (!strcmp(cmd, "expect_free") && argc >= 3) return t_expect_free(strtoull(argv[2], 0, 0));
  if (!strcmp(cmd, "vmm")) return t_vmm();
  if (!strcmp(cmd, "physis") && argc >= 4) { u64 w = strtoull(argv[3], 0, 0), h = phys(atoi(argv[2])); if (h != w) fprintf(stderr, "device %s physically holds %llu, want %llu\n", argv[2], h, w); return h != w; }
  if (!strcmp(cmd, "peer") && argc >= 3) return t_peer(atoi(argv[2]), argc > 3 ? argv[3] : 0, argc > 4 ? argv[4] : 0);
  if (!strcmp(cmd, "foreign")) return t_foreign();
  if (!strcmp(cmd, "pool")) return t_pool();
  if (!strcmp(cmd, "graphmem")) return t_graphmem();
  if (!strcmp(cmd, "capturectl")) return t_capturectl();
  if (!strcmp(cmd, "capture")) return t_capture();
  if (!strcmp(cmd, "pitchmsg")) { ctx_on(0); u64 p; size_t pt; CUresult r = A.cuMemAllocPitch(&p, &pt, 1 << 20, 1 << 20, 4); CHECK(r == 2, "pitch over the slice: %d", r); return failures ? 1 : 0; }
  if (!strcmp(cmd, "pooldev")) return t_pooldev();
  if (!strcmp(cmd, "ctxlife")) return t_ctxlife();
  if (!strcmp(cmd, "execself") && argc >= 3) return t_execself(argv[0], strtoull(argv[2], 0, 0));
  if (!strcmp(cmd, "zombie") && argc >= 3) return t_zombie(strtoull(argv[2], 0, 0));
  fprintf(stderr, "unknown command %s\n", cmd);
  return 2;
}
