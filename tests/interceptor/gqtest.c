/* Test driver for libgpuquota.so against the fake libcuda/libnvidia-ml.
   Built twice: gqtest_dl (dlopen + dlsym / cuGetProcAddress) and
   gqtest_direct (-DDIRECT: linked against libcuda.so.1).
   Usage: gqtest SUBCOMMAND [args]; exit 0 = pass, messages on stderr. */
#include "gqtest.h"

int failures;
struct api A;
void *cuda_h;
const char *mode = "dlsym";
void (*fake_stats)(struct fake_stats *);
void (*fake_set_external)(int, unsigned long long);
void (*fake_fail_next_free)(void);


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

void *gpa_get(const char *base, int ver, u64 flags) {
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

const char *lib_of(void *p) {
  Dl_info di;
  if (!p || !dladdr(p, &di) || !di.dli_fname) return "?";
  const char *s = strrchr(di.dli_fname, '/');
  return s ? s + 1 : di.dli_fname;
}
int ours(void *p) { return strstr(lib_of(p), "libgpuquota") != 0; }

u64 envu(const char *n, u64 def) { const char *e = getenv(n); return e ? strtoull(e, 0, 0) : def; }

void *ctx_on(int dev) {
  int d; void *c = 0;
  REQUIRE(A.cuInit(0) == 0, "cuInit");
  REQUIRE(A.cuDeviceGet(&d, dev) == 0, "cuDeviceGet");
  CUresult r = A.cuCtxCreate(&c, 0, d);
  REQUIRE(r == 0, "cuCtxCreate %d", r);
  return c;
}
struct fake_stats stats(void) { struct fake_stats s; fake_stats(&s); return s; }
size_t info_free(void) { size_t f = 0, t = 0; CUresult r = A.cuMemGetInfo(&f, &t); CHECK(r == 0, "meminfo %d", r); return f; }

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
  if (!strcmp(cmd, "ctxsmall")) return t_ctxsmall();
  if (!strcmp(cmd, "ctxsmall_unseen")) return t_ctxsmall_unseen();
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
  if (!strcmp(cmd, "pergpu")) return t_pergpu();
  if (!strcmp(cmd, "burst")) return t_burst();
  if (!strcmp(cmd, "live") && argc >= 4) return t_live(argv[2], argv[3]);
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

