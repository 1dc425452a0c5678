/* The container's grant (formats/src/grant.rs): each GPU is admitted against
   its own slice, and a slice the host changes while the process runs is seen
   by the next query and the next allocation. */
#include "gqtest.h"

/* NVML's total of device i (the interceptor's slice). */
static u64 nvml_total(unsigned i) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h, "dlopen nvml %s", dlerror());
  int (*init)(unsigned) = dlsym(h, "nvmlInitWithFlags");
  int (*byidx)(unsigned, void **) = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  int (*mi)(void *, nvmlMemory_t *) = dlsym(h, "nvmlDeviceGetMemoryInfo");
  REQUIRE(init && byidx && mi && init(0) == 0, "nvml");
  void *d; nvmlMemory_t m; REQUIRE(byidx(i, &d) == 0 && mi(d, &m) == 0, "nvml memory info");
  return m.total;
}

/* GQ_SLICE0, GQ_SLICE1: the slices of GPUs 0 and 1. On each GPU the
   reports and the admission use that GPU's own bytes. */
int t_pergpu(void) {
  u64 slice[2] = {envu("GQ_SLICE0", 0), envu("GQ_SLICE1", 0)};
  void *c[2] = {ctx_on(0), ctx_on(1)};
  for (int d = 0; d < 2; d++) {
    A.cuCtxSetCurrent(c[d]);
    size_t f = 0, t = 0; CHECK(A.cuMemGetInfo(&f, &t) == 0, "meminfo");
    CHECK(t == slice[d] && f == slice[d], "GPU %d: cuMemGetInfo %zu of %zu, want %llu", d, f, t, (unsigned long long)slice[d]);
    size_t tot = 0; CHECK(A.cuDeviceTotalMem(&tot, d) == 0 && tot == slice[d], "GPU %d: cuDeviceTotalMem %zu", d, tot);
    CHECK(nvml_total(d) == slice[d], "GPU %d: NVML total %llu", d, (unsigned long long)nvml_total(d));
    u64 p, q;
    CHECK(A.cuMemAlloc(&p, slice[d]) == 0, "GPU %d: its whole slice refused", d);
    CHECK(A.cuMemAlloc(&q, MiB) == 2, "GPU %d: beyond its slice not refused", d);
    A.cuMemFree(p);
  }
  return failures ? 1 : 0;
}

/* GQ_SLICE, then GQ_SLICE2 once READY was written and CHANGED exists (the
   harness changes the grant in between). */
int t_live(const char *ready, const char *changed) {
  u64 s1 = envu("GQ_SLICE", 0), s2 = envu("GQ_SLICE2", 0);
  ctx_on(0);
  size_t f = 0, t = 0;
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && t == s1, "before: total %zu, want %llu", t, (unsigned long long)s1);
  u64 p, q, r2;
  CHECK(A.cuMemAlloc(&p, s1) == 0, "the first slice");
  CHECK(A.cuMemAlloc(&q, MiB) == 2, "beyond the first slice not refused");
  FILE *fh = fopen(ready, "w"); if (fh) fclose(fh);
  for (int i = 0; i < 3000 && access(changed, F_OK) != 0; i++) usleep(10000);
  REQUIRE(access(changed, F_OK) == 0, "the grant was not changed");
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && t == s2, "after: cuMemGetInfo total %zu, want %llu", t, (unsigned long long)s2);
  CHECK(nvml_total(0) == s2, "after: NVML total %llu, want %llu", (unsigned long long)nvml_total(0), (unsigned long long)s2);
  if (s2 > s1) {
    CHECK(A.cuMemAlloc(&q, s2 - s1) == 0, "the grown slice refused");
    CHECK(A.cuMemAlloc(&r2, MiB) == 2, "beyond the grown slice not refused");
    A.cuMemFree(q);
  } else {
    CHECK(A.cuMemAlloc(&q, MiB) == 2, "allocation above the shrunk slice not refused");
  }
  A.cuMemFree(p);
  return failures ? 1 : 0;
}

/* A burstable slice (GQ_SLICE the guarantee, GQ_LIMIT the limit; a
   version-3 grant): NVML shows the limit even before any CUDA call names
   the GPU; cuMemGetInfo too; within the guarantee an allocation is device
   memory, past it managed memory (lent), past the limit refused; a VMM
   allocation past the guarantee is refused (not evictable). */
int t_burst(void) {
  u64 g = envu("GQ_SLICE", 0), l = envu("GQ_LIMIT", 0);
  CHECK(nvml_total(0) == l, "NVML total before CUDA %llu, want the limit %llu", (unsigned long long)nvml_total(0), (unsigned long long)l);
  ctx_on(0);
  size_t f = 0, t = 0;
  CHECK(A.cuMemGetInfo(&f, &t) == 0 && t == l, "cuMemGetInfo total %zu, want %llu", t, (unsigned long long)l);
  int (*attr)(void *, int, u64) = dlsym(cuda_h, "cuPointerGetAttribute");
  REQUIRE(attr, "cuPointerGetAttribute");
  u64 p, q, r;
  CHECK(A.cuMemAlloc(&p, g) == 0, "the guarantee refused");
  unsigned managed = 9;
  CHECK(attr(&managed, 8, p) == 0 && managed == 0, "within the guarantee: managed=%u, want device memory", managed);
  CHECK(A.cuMemAlloc(&q, l - g) == 0, "the burst up to the limit refused");
  managed = 9;
  CHECK(attr(&managed, 8, q) == 0 && managed == 1, "past the guarantee: managed=%u, want managed (lent)", managed);
  CHECK(A.cuMemAlloc(&r, MiB) == 2, "past the limit not refused");
  A.cuMemFree(q);
  A.cuMemFree(p);
  return failures ? 1 : 0;
}
