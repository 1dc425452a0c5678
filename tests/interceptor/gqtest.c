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
};
static struct api A;
static void *cuda_h;
static const char *mode = "dlsym";
static void (*fake_stats)(struct fake_stats *);
static void (*fake_set_external)(int, unsigned long long);

typedef CUresult (*gpa2_t)(const char *, void **, int, u64, int *);
typedef CUresult (*gpa1_t)(const char *, void **, int, u64);

#ifdef DIRECT
#define D(n) extern CUresult n();
D(cuInit) D(cuDeviceGet) D(cuCtxCreate_v2) D(cuCtxCreate) D(cuCtxCreate_v4) D(cuDevicePrimaryCtxRetain) D(cuCtxSetCurrent)
D(cuMemAlloc_v2) D(cuMemAlloc) D(cuMemFree_v2) D(cuMemFree) D(cuMemAllocPitch_v2) D(cuMemAllocPitch) D(cuMemAllocManaged)
D(cuMemAllocAsync) D(cuMemAllocFromPoolAsync) D(cuMemFreeAsync) D(cuMemCreate) D(cuMemRelease) D(cuArrayCreate_v2)
D(cuArrayCreate) D(cuArray3DCreate_v2) D(cuArray3DCreate) D(cuArrayDestroy) D(cuMipmappedArrayCreate) D(cuMipmappedArrayDestroy)
D(cuMemGetInfo_v2) D(cuMemGetInfo) D(cuDeviceTotalMem_v2) D(cuDeviceTotalMem) D(cuGraphAddMemAllocNode) D(cuMemPoolTrimTo)
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

static int t_apis(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  REQUIRE(info_free() == slice, "start free %zu", info_free());
  u64 p; unsigned p32, pitch32; size_t pitch; void *h; u64 vh;
  CHARGE("cuMemAlloc_v2", 3 * MiB, A.cuMemAlloc(&p, 3 * MiB), A.cuMemFree(p));
  CHARGE("cuMemAlloc(legacy)", 5 * MiB, A.cuMemAlloc_v1(&p32, 5 * MiB), A.cuMemFree_v1(p32));
  CHARGE("cuMemAlloc_v2+legacy free", 1 * MiB, A.cuMemAlloc(&p, 1 * MiB), A.cuMemFree(p));
  CHARGE("cuMemAllocPitch_v2", 1024ull * 100, A.cuMemAllocPitch(&p, &pitch, 1000, 100, 4), A.cuMemFree(p));
  CHECK(pitch == 1024, "pitch %zu", pitch);
  CHARGE("cuMemAllocPitch(legacy)", 1024ull * 300, A.cuMemAllocPitch_v1(&p32, &pitch32, 513, 300, 4), A.cuMemFree_v1(p32));
  CHARGE("cuMemAllocManaged", 7 * MiB, A.cuMemAllocManaged(&p, 7 * MiB, 1), A.cuMemFree(p));
  CHARGE("cuMemAllocAsync", 2 * MiB, A.cuMemAllocAsync(&p, 2 * MiB, 0), A.cuMemFreeAsync(p, 0));
  CHARGE("cuMemAllocAsync+cuMemFree", 2 * MiB, A.cuMemAllocAsync(&p, 2 * MiB, 0), A.cuMemFree(p));
  CHARGE("cuMemAllocFromPoolAsync", 4 * MiB, A.cuMemAllocFromPoolAsync(&p, 4 * MiB, (void *)1, 0), A.cuMemFreeAsync(p, 0));
  CHECK(A.cuMemPoolTrimTo((void *)1, 0) == 0, "trim");
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
  void *node;
  CHECK(A.cuGraphAddMemAllocNode(&node, (void *)1, 0, 0, params) == 2, "graph node above the slice not refused");
  *(size_t *)(params + 104) = slice / 2;
  CHECK(A.cuGraphAddMemAllocNode(&node, (void *)1, 0, 0, params) == 0, "graph node within the slice refused");
  /* every producer refuses above the slice without reaching the driver */
  struct fake_stats s0 = stats();
  u64 big = slice + MiB;
  CHECK(A.cuMemAlloc(&p, big) == 2, "cuMemAlloc over");
  CHECK(A.cuMemAlloc_v1(&p32, (unsigned)big) == 2, "cuMemAlloc legacy over");
  CHECK(A.cuMemAllocPitch(&p, &pitch, big / 1024, 1024, 4) == 2, "pitch over");
  CHECK(A.cuMemAllocManaged(&p, big, 1) == 2, "managed over");
  CHECK(A.cuMemAllocAsync(&p, big, 0) == 2, "async over");
  CHECK(A.cuMemAllocFromPoolAsync(&p, big, (void *)1, 0) == 2, "pool over");
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
    /* the parent's pointer is unknown in the child: passes to the driver */
    _exit(0);
  }
  int st; waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (%d)", st);
  /* the child is gone: its usage is back */
  CHECK(A.cuMemFree(p) == 0, "parent free");
  u64 q; CHECK(A.cuMemAlloc(&q, slice) == 0, "whole slice after child exit + free");
  A.cuMemFree(q);
  /* posix_spawn-like: exec a new image that allocates */
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

/* everything refused (broken limits file: fail closed) */
static int t_refuse(void) {
  ctx_on(0);
  u64 p; CUresult r = A.cuMemAlloc(&p, MiB);
  CHECK(r == 2, "alloc with a broken limits file returned %d, want 2", r);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: gqtest CMD [args]\n"); return 2; }
  const char *cmd = argv[1];
  if (getenv("GQ_MODE")) mode = getenv("GQ_MODE");
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
  if (!strcmp(cmd, "multidev")) return t_multidev();
  if (!strcmp(cmd, "gpa")) return t_gpa();
  if (!strcmp(cmd, "msg")) return t_msg();
  if (!strcmp(cmd, "refuse")) return t_refuse();
  fprintf(stderr, "unknown command %s\n", cmd);
  return 2;
}
