/* gqtest: several GPUs: peer access, a foreign GPU.
   Part of gqtest (tests/interceptor/gqtest.c has main and the API table). */
#include "gqtest.h"

/* ---------------------------------------------------------------- peer access */
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
int t_peer(int rank, const char *ready, const char *stop) {
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

/* ---------------------------------------------------------------- foreign GPU */
/* A container whose slice is GPU 1 alone (limits gpus=GPU 1's UUID) sees two
   GPUs: GPU 0 is not part of its slice and gets nothing — allocations are
   refused, cuMemGetInfo/cuDeviceTotalMem/NVML report 0 for it — while GPU 1
   keeps its slice. GQ_OWN0=1 (both GPUs in the slice): the negative control,
   GPU 0 allocates and reports the slice. */
int t_foreign(void) {
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
