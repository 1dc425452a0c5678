/* gqtest: driver-side lifetimes: failed frees, VMM, stream-ordered pools, context destroy, graph memory.
   Part of gqtest (tests/interceptor/gqtest.c has main and the API table). */
#include "gqtest.h"

/* ---------------------------------------------------------------- lifetimes */
u64 phys(int dev) { return stats().in_use[dev]; }

/* a failed free keeps its charge; the retry releases it */
int t_failfree(void) {
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
int t_expect_free(u64 want) {
  ctx_on(0);
  size_t f = info_free();
  CHECK(f == want, "cuMemGetInfo free %zu, want %llu (other processes of the container must count)", f, (unsigned long long)want);
  u64 p;
  CHECK(A.cuMemAlloc(&p, want + MiB) == 2, "allocation beyond the reported free not refused");
  if (want >= MiB) { CHECK(A.cuMemAlloc(&p, want) == 0, "allocation of the reported free refused"); A.cuMemFree(p); }
  return failures ? 1 : 0;
}

/* VMM: memory lives while its handle has references or any mapping */
int t_vmm(void) {
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

/* stream-ordered pools are charged for what they reserve */
int t_pool(void) {
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
int t_pooldev(void) {
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
int t_ctxlife(void) {
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
int t_graphmem(void) {
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
