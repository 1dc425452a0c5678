/* gqtest: stream capture and graph launches.
   Part of gqtest (tests/interceptor/gqtest.c has main and the API table). */
#include "gqtest.h"

/* ---------------------------------------------------------------- capture */
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
int t_capturectl(void) {
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
int t_capture(void) {
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

  /* 3/4 of the slice captured and kept by the graph, then another
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
