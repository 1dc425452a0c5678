/* Odd calls: a battery of calls with arguments the driver
   rejects, sized above any slice, printing "name code" per call. Run it
   natively and under libgpuquota.so with a slice: the outputs must be
   identical (the interceptor must not answer CUDA_ERROR_OUT_OF_MEMORY where
   the driver says CUDA_ERROR_INVALID_VALUE). Works against the fake driver
   (CI) and a real libcuda (tests/gpu/graphs.py on the H200): only the
   driver API, through dlopen/dlsym like a framework.
   Build: cc -O2 -o oddcalls oddcalls.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long u64;
struct prop { int type, htypes, loc_type, loc_id; void *win32; u64 flags; };
struct adesc { size_t w, h; unsigned fmt, ch; };
struct a3desc { size_t w, h, d; unsigned fmt, ch, flags; };
static void *h;
static void *sym(const char *n) {
  void *p = dlsym(h, n);
  if (!p) { fprintf(stderr, "oddcalls: no %s\n", n); exit(2); }
  return p;
}
#define OUT(name, expr) do { CUresult r_ = (expr); printf("%-44s %d\n", name, r_); fflush(stdout); } while (0)

int main(void) {
  h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "oddcalls: %s\n", dlerror()); return 2; }
  CUresult (*init)(unsigned) = sym("cuInit");
  CUresult (*retain)(void **, int) = sym("cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(void *) = sym("cuCtxSetCurrent");
  CUresult (*alloc)(u64 *, size_t) = sym("cuMemAlloc_v2");
  CUresult (*mfree)(u64) = sym("cuMemFree_v2");
  CUresult (*pitch)(u64 *, size_t *, size_t, size_t, unsigned) = sym("cuMemAllocPitch_v2");
  CUresult (*pitch1)(unsigned *, unsigned *, unsigned, unsigned, unsigned) = sym("cuMemAllocPitch");
  CUresult (*managed)(u64 *, size_t, unsigned) = sym("cuMemAllocManaged");
  CUresult (*async)(u64 *, size_t, void *) = sym("cuMemAllocAsync");
  CUresult (*create)(u64 *, size_t, const struct prop *, u64) = sym("cuMemCreate");
  CUresult (*release)(u64) = sym("cuMemRelease");
  CUresult (*arr)(void **, const struct adesc *) = sym("cuArrayCreate_v2");
  CUresult (*arr3)(void **, const struct a3desc *) = sym("cuArray3DCreate_v2");
  CUresult (*mip)(void **, const struct a3desc *, unsigned) = sym("cuMipmappedArrayCreate");
  void *ctx = 0;
  if (init(0) || retain(&ctx, 0) || setcur(ctx)) { fprintf(stderr, "oddcalls: no context\n"); return 2; }
  u64 p = 0; size_t pt = 0; unsigned p32 = 0, pt32 = 0; void *a = 0;
  /* pitch: wider than the device's maximum pitch, and a size beyond 64 bits */
  OUT("cuMemAllocPitch(2^33 x 2^31, elem 16)", pitch(&p, &pt, 1ull << 33, 1ull << 31, 16));
  OUT("cuMemAllocPitch(2^40 x 2^40, elem 4)", pitch(&p, &pt, 1ull << 40, 1ull << 40, 4));
  OUT("cuMemAllocPitch(2^32 x 2^20, elem 4)", pitch(&p, &pt, 1ull << 32, 1ull << 20, 4));
  OUT("cuMemAllocPitch(2^30 x 2^20, elem 3)", pitch(&p, &pt, 1ull << 30, 1ull << 20, 3));
  OUT("cuMemAllocPitch(0 x 2^40, elem 4)", pitch(&p, &pt, 0, 1ull << 40, 4));
  OUT("cuMemAllocPitch(2^20 x 0, elem 4)", pitch(&p, &pt, 1ull << 20, 0, 4));
  OUT("cuMemAllocPitch(NULL pitch, 2^20 x 2^20)", pitch(&p, 0, 1ull << 20, 1ull << 20, 4));
  OUT("cuMemAllocPitch_v1(2^31 x 2^20, elem 5)", pitch1(&p32, &pt32, 1u << 31, 1u << 20, 5));
  /* plain sizes */
  OUT("cuMemAlloc(0)", alloc(&p, 0));
  OUT("cuMemAlloc(NULL, 2^40)", alloc(0, 1ull << 40));
  OUT("cuMemAllocManaged(2^40, flags 0)", managed(&p, 1ull << 40, 0));
  OUT("cuMemAllocManaged(2^40, flags 7)", managed(&p, 1ull << 40, 7));
  OUT("cuMemAllocAsync(0)", async(&p, 0, 0));
  /* VMM: sizes not a multiple of the granularity */
  struct prop pr = {1, 0, 1, 0, 0, 0};
  u64 hd = 0;
  OUT("cuMemCreate(2^40 + 1)", create(&hd, (1ull << 40) + 1, &pr, 0));
  OUT("cuMemCreate(2^40 + 2^20)", create(&hd, (1ull << 40) + (1ull << 20), &pr, 0));
  OUT("cuMemCreate(2^40, NULL prop)", create(&hd, 1ull << 40, 0, 0));
  OUT("cuMemCreate(2^40, flags 1)", create(&hd, 1ull << 40, &pr, 1));
  /* arrays: channel counts other than 1, 2, 4 */
  struct adesc ad = {1u << 20, 1u << 20, 0x20, 3};
  OUT("cuArrayCreate(2^20 x 2^20 float x3)", arr(&a, &ad));
  struct a3desc a3 = {1u << 14, 1u << 14, 1u << 14, 0x20, 3, 0};
  OUT("cuArray3DCreate(2^14^3 float x3)", arr3(&a, &a3));
  struct a3desc m = {1u << 16, 1u << 16, 0, 0x20, 4, 0};
  OUT("cuMipmappedArrayCreate(levels 0)", mip(&a, &m, 0));
  m.ch = 3;
  OUT("cuMipmappedArrayCreate(float x3)", mip(&a, &m, 4));
  (void)mfree; (void)release;
  return 0;
}
