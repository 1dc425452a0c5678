/* gqtest: processes and contexts: hold, race, fill, peak, fork, context overhead, multi-device, cuGetProcAddress details, messages.
   Part of gqtest (tests/interceptor/gqtest.c has main and the API table). */
#include "gqtest.h"

/* ---------------------------------------------------------------- hold */
/* allocate BYTES, touch READY file, wait until STOP file exists */
int t_hold(u64 bytes, const char *ready, const char *stop) {
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
int t_race(double seconds, unsigned seed) {
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
int t_fill(u64 bytes, u64 chunk) {
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
int t_peak(u64 limit) {
  struct fake_stats s = stats();
  printf("peak=%llu in_use=%llu limit=%llu refused_by_driver=%llu\n", (unsigned long long)s.peak[0], (unsigned long long)s.in_use[0],
         (unsigned long long)limit, (unsigned long long)s.shared_refused);
  CHECK(s.peak[0] > 0, "no allocation recorded");
  CHECK(s.peak[0] <= limit, "driver peak %llu exceeded the slice %llu", (unsigned long long)s.peak[0], (unsigned long long)limit);
  return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- fork */
int t_fork(void) {
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
/* Every context costs what it costs (GQ_OVERHEAD each): the primary once
   however often it is retained, and each context the process creates
   beside it, until the slice is full; the next creation is refused with
   CUDA_ERROR_OUT_OF_MEMORY, and destroying one lets the next succeed. */
int t_ctx(void) {
  u64 slice = envu("GQ_SLICE", 0), ov = envu("GQ_OVERHEAD", 0);
  int d; void *p1, *p2;
  REQUIRE(A.cuInit(0) == 0 && A.cuDeviceGet(&d, 0) == 0, "init");
  REQUIRE(A.cuDevicePrimaryCtxRetain(&p1, d) == 0, "retain");
  REQUIRE(A.cuDevicePrimaryCtxRetain(&p2, d) == 0 && p1 == p2, "retain again");
  A.cuCtxSetCurrent(p1);
  CHECK(info_free() == slice - ov, "after the primary context free %zu, want %llu", info_free(), (unsigned long long)(slice - ov));
  /* contexts that still fit (8 when they cost nothing) */
  u64 room = ov ? (slice - ov) / ov : 8;
  void *c[64]; int n = 0; CUresult r = 0;
  while (n <= (int)room && n < 64) {
    r = n % 2 ? A.cuCtxCreate_v1(&c[n], 0, d) : A.cuCtxCreate_v4(&c[n], 0, 0, d);
    if (r) break;
    n++;
  }
  if (ov) CHECK(n == (int)room && r == 2, "created %d contexts beside the primary (room for %llu), then %d (want 2)", n, (unsigned long long)room, r);
  else CHECK(n == (int)room + 1, "uncharged contexts refused: %d created, %d", n, r);
  A.cuCtxSetCurrent(p1);
  CHECK(info_free() == slice - ov - n * ov, "after %d created contexts free %zu, want %llu", n, info_free(), (unsigned long long)(slice - ov - n * ov));
  if (n > 0) {
    CHECK(A.cuCtxDestroy(c[0]) == 0, "destroy");
    A.cuCtxSetCurrent(p1);
    CHECK(info_free() == slice - n * ov, "destroy did not refund: free %zu, want %llu", info_free(), (unsigned long long)(slice - n * ov));
    CHECK(A.cuCtxCreate(&c[0], 0, d) == 0, "a creation after a destroy refused");
    A.cuCtxSetCurrent(p1);
    CHECK(info_free() == slice - ov - n * ov, "free %zu after the new context", info_free());
  }
  if (getenv("FAKE_CUDA_CTX_BYTES")) PHYS_LE(0, slice);
  return failures ? 1 : 0;
}

/* a slice smaller than one context: the first context fails with the
   driver's out-of-memory code, the one line names the context, and nothing
   is charged (the slice stays empty) */
int t_ctxsmall(void) {
  int d; void *c;
  REQUIRE(A.cuInit(0) == 0 && A.cuDeviceGet(&d, 0) == 0, "init");
  CHECK(A.cuDevicePrimaryCtxRetain(&c, d) == 2, "primary context in a slice below its charge: want CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(A.cuCtxCreate_v4(&c, 0, 0, d) == 2, "cuCtxCreate: want CUDA_ERROR_OUT_OF_MEMORY");
  return failures ? 1 : 0;
}

/* the same with a context made behind the interceptor's back (as the CUDA
   runtime does on the H200): charged at the first allocation, which is
   refused; the first line names the context */
int t_ctxsmall_unseen(void) {
  void *(*impl_of)(const char *, int, unsigned long long) = (void *(*)(const char *, int, unsigned long long))dlsym(cuda_h, "fake_cuda_impl_of");
  CUresult (*raw_create)(void **, unsigned, int) = (CUresult (*)(void **, unsigned, int))impl_of("cuCtxCreate", 3020, 0);
  REQUIRE(raw_create && !ours((void *)raw_create), "raw cuCtxCreate");
  void *c; int d; u64 p;
  REQUIRE(A.cuInit(0) == 0 && A.cuDeviceGet(&d, 0) == 0 && raw_create(&c, 0, d) == 0, "raw context");
  CHECK(A.cuMemAlloc(&p, 512) == 2, "first allocation beside a context larger than the slice: want CUDA_ERROR_OUT_OF_MEMORY");
  return failures ? 1 : 0;
}

/* a context made behind the interceptor's back (the driver's own entry
   point): its overhead is charged at the first query/allocation on it */
int t_ctxunseen(void) {
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
int t_multidev(void) {
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
int t_gpa(void) {
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
int t_msg(void) {
  u64 slice = envu("GQ_SLICE", 0);
  ctx_on(0);
  u64 p, q;
  CHECK(A.cuMemAlloc(&p, slice / 8 * 5) == 0, "alloc");
  for (int i = 0; i < 50; i++) CHECK(A.cuMemAlloc(&q, slice / 2) == 2, "refuse");
  return failures ? 1 : 0;
}
