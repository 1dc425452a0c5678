/* Allocation fast-path microbenchmark, native or under libgpuquota.so.
   N x (cuMemAlloc_v2 + cuMemFree_v2) of SIZE bytes through dlopen'ed
   libcuda.so.1, in PROCS processes at once (fork), then cuMemGetInfo_v2.
   Build: cc -O2 -o bench_alloc bench_alloc.c -ldl -lpthread
   Run:   ./bench_alloc 20000 1048576 1                       # native
          LD_PRELOAD=/path/libgpuquota.so GPU_QUOTA_VRAM=8g ./bench_alloc 20000 1048576 1
          ... ./bench_alloc 20000 1048576 4                   # 4 processes racing
   BENCH_GPA=1 resolves through cuGetProcAddress_v2 (the CUDA runtime's path).
   Output: one line per process plus a summary line "mode=... ns_per_pair=...". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext; typedef unsigned long long CUdeviceptr;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
static void *h; static gpa2_t gpa;
static void *sym(const char *dl, const char *base) {
  if (gpa) { void *p = 0; int st; if (gpa(base, &p, 12000, 0, &st) == 0) return p; return 0; }
  return dlsym(h, dl);
}
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  size_t sz = argc > 2 ? strtoull(argv[2], 0, 10) : (1 << 20);
  int procs = argc > 3 ? atoi(argv[3]) : 1;
  h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("dlopen fail %s\n", dlerror()); return 1; }
  if (getenv("BENCH_GPA")) {
    gpa2_t boot = (gpa2_t)dlsym(h, "cuGetProcAddress_v2"); int st;
    if (!boot || boot("cuGetProcAddress", (void **)&gpa, 12000, 0, &st)) { printf("no cuGetProcAddress_v2\n"); return 1; }
  }
  CUresult (*cuInit)(unsigned) = sym("cuInit", "cuInit");
  CUresult (*cuDeviceGet)(CUdevice *, int) = sym("cuDeviceGet", "cuDeviceGet");
  CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) = sym("cuCtxCreate_v2", "cuCtxCreate");
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
  CUresult (*cuCtxSetCurrent)(CUcontext) = sym("cuCtxSetCurrent", "cuCtxSetCurrent");
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2", "cuMemAlloc");
  CUresult (*cuMemFree)(CUdeviceptr) = sym("cuMemFree_v2", "cuMemFree");
  CUresult (*cuMemGetInfo)(size_t *, size_t *) = sym("cuMemGetInfo_v2", "cuMemGetInfo");
  if (!cuInit || !cuMemAlloc || !cuMemFree || !cuMemGetInfo) { printf("symbols missing\n"); return 1; }
  Dl_info di; const char *via = "driver";
  if (dladdr((void *)cuMemAlloc, &di) && di.dli_fname && strstr(di.dli_fname, "libgpuquota")) via = "libgpuquota";
  double *res = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int child = -1;
  for (int i = 0; i < procs - 1 && child != 0; i++) { child = fork(); if (child == 0) { child = i + 1; break; } child = -1; }
  int me = child > 0 ? child : 0;
  CUresult r = cuInit(0); if (r) { printf("cuInit %d\n", r); return 1; }
  CUdevice d; CUcontext c;
  cuDeviceGet(&d, 0);
  if (cuDevicePrimaryCtxRetain && cuCtxSetCurrent && cuDevicePrimaryCtxRetain(&c, d) == 0) cuCtxSetCurrent(c);
  else if ((r = cuCtxCreate(&c, 0, d))) { printf("ctx %d\n", r); return 1; }
  size_t fr, tot;
  CUdeviceptr p;
  for (int i = 0; i < 100; i++) { if (cuMemAlloc(&p, sz) == 0) cuMemFree(p); }
  int errs = 0;
  double t0 = now();
  for (int i = 0; i < n; i++) { r = cuMemAlloc(&p, sz); if (r) { errs++; continue; } cuMemFree(p); }
  double t1 = now();
  double pair = (t1 - t0) / n * 1e9;
  int m = n * 10 > 200000 ? 200000 : n * 10;
  t0 = now(); for (int i = 0; i < m; i++) cuMemGetInfo(&fr, &tot); t1 = now();
  double gi = (t1 - t0) / m * 1e9;
  res[me * 2] = pair; res[me * 2 + 1] = gi;
  printf("proc=%d via=%s pairs=%d size=%zu ns_per_pair=%.1f memgetinfo_ns=%.1f refused=%d free=%zu total=%zu\n",
         me, via, n, sz, pair, gi, errs, fr, tot);
  if (me != 0) return 0;
  int st, bad = 0; while (wait(&st) > 0) if (!WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
  double sp = 0, sg = 0; for (int i = 0; i < procs; i++) { sp += res[i * 2]; sg += res[i * 2 + 1]; }
  printf("mode=%s%s procs=%d size=%zu ns_per_pair=%.1f memgetinfo_ns=%.1f\n", via, gpa ? "+gpa" : "", procs, sz, sp / procs, sg / procs);
  return bad || errs;
}
