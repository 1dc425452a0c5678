/* gqtest: entry paths and what each API is charged: paths, apis, frees, meminfo, nvml.
   Part of gqtest (tests/interceptor/gqtest.c has main and the API table). */
#include "gqtest.h"

/* ---------------------------------------------------------------- paths */
/* Each entry path hands out wrappers, and they enforce the slice. */
int t_paths(void) {
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
  CHECK(!ours(A.cuDeviceGet) && !ours(A.cuCtxSetCurrent), "non-intercepted symbol wrapped in mode %s", mode);
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
int t_apis(void) {
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
int t_frees(void) {
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
int t_meminfo(void) {
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
int t_nvml(void) {
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
