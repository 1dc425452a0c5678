/* Shared by gqtest's parts (tests/interceptor/gqtest*.c): the API table, the
   checks, the fake driver's hooks and the helpers every case uses. */
#ifndef GQTEST_H
#define GQTEST_H
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
  /* lifetimes */
  CUresult (*cuStreamSynchronize)(void *);
  CUresult (*cuStreamCreate)(void **, unsigned);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuCtxDestroy)(void *);
  CUresult (*cuDevicePrimaryCtxReset)(int);
  CUresult (*cuDevicePrimaryCtxRelease)(int);
  CUresult (*cuMemMap)(u64, size_t, size_t, u64, u64);
  CUresult (*cuMemUnmap)(u64, size_t);
  CUresult (*cuMemAddressReserve)(u64 *, size_t, size_t, u64, u64);
  CUresult (*cuMemRetainAllocationHandle)(u64 *, void *);
  CUresult (*cuMemExportToShareableHandle)(void *, u64, int, u64);
  CUresult (*cuMemImportFromShareableHandle)(u64 *, void *, int);
  CUresult (*cuMemPoolCreate)(void **, const void *);
  CUresult (*cuMemPoolDestroy)(void *);
  CUresult (*cuMemPoolSetAttribute)(void *, int, void *);
  CUresult (*cuMemPoolGetAttribute)(void *, int, void *);
  CUresult (*cuDeviceGetDefaultMemPool)(void **, int);
  CUresult (*cuCtxSetLimit)(int, size_t);
  CUresult (*cuGraphInstantiateWithFlags)(void **, void *, u64);
  CUresult (*cuDeviceGraphMemTrim)(int);
  CUresult (*cuDeviceSetMemPool)(int, void *);
  /* peer access */
  CUresult (*cuMemSetAccess)(u64, size_t, const void *, size_t);
  CUresult (*cuMemGetAccess)(u64 *, const void *, u64);
};

extern int failures;
extern struct api A;
extern void *cuda_h;
extern const char *mode;
extern void (*fake_stats)(struct fake_stats *);
extern void (*fake_set_external)(int, unsigned long long);
extern void (*fake_fail_next_free)(void);

/* stream-ordered pool attributes (CUmemPool_attribute) */
#define ATTR_RELEASE_THRESHOLD 4
#define ATTR_RESERVED_MEM_CURRENT 5
/* NVML memory info, v1 and v2 */
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

/* cuGetProcAddress_v2 and v1 */
typedef CUresult (*gpa2_t)(const char *, void **, int, u64, int *);
typedef CUresult (*gpa1_t)(const char *, void **, int, u64);

/* gqtest.c */
void *gpa_get(const char *base, int ver, u64 flags);
const char *lib_of(void *p);
int ours(void *p);
u64 envu(const char *n, u64 def);
void *ctx_on(int dev);
struct fake_stats stats(void);
size_t info_free(void);

/* phys: what device DEV physically holds (gqtest_lifetimes.c) */
u64 phys(int dev);
#define PHYS_LE(dev, lim) CHECK(phys(dev) <= (lim), "device %d physically holds %llu > %llu", dev, (unsigned long long)phys(dev), (unsigned long long)(lim))

/* the cases: one per subcommand */
int t_paths(void);
int t_apis(void);
int t_frees(void);
int t_meminfo(void);
int t_nvml(void);
int t_hold(u64 bytes, const char *ready, const char *stop);
int t_race(double seconds, unsigned seed);
int t_fill(u64 bytes, u64 chunk);
int t_peak(u64 limit);
int t_fork(void);
int t_ctx(void);
int t_ctxunseen(void);
int t_ctxsmall(void);
int t_ctxsmall_unseen(void);
int t_multidev(void);
int t_gpa(void);
int t_msg(void);
int t_failfree(void);
int t_expect_free(u64 want);
int t_vmm(void);
int t_pool(void);
int t_pooldev(void);
int t_ctxlife(void);
int t_graphmem(void);
int t_capturectl(void);
int t_capture(void);
int t_execself(const char *self, u64 bytes);
int t_zombie(u64 bytes);
int t_forkinit(void);
int t_refuse(void);
int t_peer(int rank, const char *ready, const char *stop);
int t_foreign(void);
int t_pergpu(void);
int t_burst(void);
int t_live(const char *ready, const char *changed);
#endif
