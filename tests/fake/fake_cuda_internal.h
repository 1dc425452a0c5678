/* The fake libcuda's parts (fake_cuda.c, fake_pools.c, fake_capture.c, fake_vmm.c,
   fake_exports.c) share this: types, handles, the process state and the model's
   helpers. Everything declared here is hidden: the library exports only the CUDA
   entry points of fake_exports.c and its test hooks. Tests only. */
#ifndef FAKE_CUDA_INTERNAL_H
#define FAKE_CUDA_INTERNAL_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fake_cuda.h"

#pragma GCC visibility push(hidden)

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long u64;
#define FAKE_MAX_PITCH 2147483647ull
enum { OK = 0, INVALID_VALUE = 1, OOM = 2, NOT_INIT = 3, INVALID_DEVICE = 101,
       INVALID_CONTEXT = 201, NOT_FOUND = 500 };
enum { K_PTR = 1, K_ARRAY = 3, K_MIPMAP = 4, K_POOL = 8, K_GRAPH = 9, K_MANAGED = 10 }; /* K_GRAPH: a graph allocation left live by a launch (pool = its exec); K_MANAGED: pool = its index in the registry's managed[] */
struct rec { u64 key; u64 size; int dev; int kind; int ctx; int pool; };
#define MAXCTX 64
struct ctx { int live, dev, primary, refs; u64 heap, stack; };
#define FAKE_SMS 4
#define FAKE_THREADS_PER_SM 64
#define cur_dev (cur_dev_of())
#define CTX_H(i) ((CUcontext)(0x300000ull + 0x40ull * (u64)(i)))
#define MAXSTREAM 64
#define STREAM_H(i) ((CUstream)(0x700000ull + 0x40ull * (u64)(i)))
#define CHECK_INIT() do { if (!g_inited) return NOT_INIT; } while (0)
struct adesc { size_t w, h; unsigned fmt, ch; };
struct adesc1 { unsigned w, h, fmt, ch; };
struct a3desc { size_t w, h, d; unsigned fmt, ch, flags; };
struct a3desc1 { unsigned w, h, d, fmt, ch, flags; };
#define MX(a) ((a) ? (a) : 1)
#define BADCH(c) ((c) != 1 && (c) != 2 && (c) != 4) /* NumChannels: 1, 2 or 4 */
#define MAXPOOL 32
struct pool { int live, dev, destroyed; u64 reserved, used, threshold; };
#define POOL_H(i) ((void *)(0x900000ull + 0x100ull * (u64)(i)))
struct pool_props { int alloc_type, htypes, loc_type, loc_id; void *win32; size_t max; unsigned short usage; unsigned char reserved[54]; };
enum { CAP_GLOBAL = 0, CAP_THREAD_LOCAL = 1, CAP_RELAXED = 2 };
enum { E_CAP_UNSUPPORTED = 900, E_CAP_INVALIDATED = 901, E_CAP_IMPLICIT = 906, E_CAP_WRONG_THREAD = 908, E_ILLEGAL_STATE = 401 };
struct cap { int active, mode, invalid, graph; pthread_t owner; unsigned long long id; };
#define UNSAFE_CALL() do { if (prohibited()) { cap_invalidate_prohibiting(); __atomic_fetch_add(&capture_violations, 1, __ATOMIC_SEQ_CST); return E_CAP_UNSUPPORTED; } } while (0)
#define MAXGRAPH 64
#define MAXGALLOC 32
struct galloc { u64 va, size; int freed; };
struct graph { int live, dev, n; struct galloc a[MAXGALLOC]; };
struct gexec { int live, dev, n, outstanding; struct galloc a[MAXGALLOC]; };
#define GRAPH_H(i) ((void *)(0xa00000ull + 0x40ull * (u64)(i)))
#define EXEC_H(i) ((void *)(0xb00000ull + 0x40ull * (u64)(i)))
#define MAXPHYS 4096
struct phys { int live, dev, refs, maps; u64 size; u64 handle; };
struct map { u64 va, size; int ph; unsigned access[FAKE_MAX_DEV]; }; /* access: CU_MEM_ACCESS_FLAGS per device */
struct prop { int type, htypes, loc_type, loc_id; void *win32; u64 flags; };
struct access_desc { int loc_type, loc_id; unsigned flags; };

/* state (defined in the part that owns it) */
extern int g_ndev;
extern u64 g_mem_of[FAKE_MAX_DEV]; /* each device's total */
extern int g_internal_gpa;
extern struct fake_shared *S;
extern struct fake_stats ST;
extern pthread_mutex_t mu;
extern int g_inited;
extern int my_proc, my_proc_pid;
int fake_mps_info(char *buf, size_t n);
extern struct rec *recs;
extern size_t nrec, caprec;
extern u64 next_ptr, next_ptr32, next_handle;
extern u64 g_ctx_bytes, g_pool_gran, g_pitch_align;
extern int g_fail_next_free;
extern struct ctx ctxs[MAXCTX];
extern int primary_of[FAKE_MAX_DEV];
extern __thread int ctx_stack[16];
extern __thread int ctx_top; /* index into ctxs, -1 none */
extern int stream_ctx[MAXSTREAM];
extern int stream_live[MAXSTREAM];
extern struct pool pools[MAXPOOL];
extern int cur_pool[FAKE_MAX_DEV];
extern int def_pool[FAKE_MAX_DEV];
extern struct cap caps[64];
extern int n_caps_global; /* active GLOBAL-mode captures, all threads */
extern __thread int t_caps_own; /* this thread's active non-relaxed captures */
extern __thread int t_caps_own_global;
extern __thread int t_mode; /* CAP_GLOBAL (0) by default */
extern unsigned long long cap_next_id;
extern u64 capture_violations; /* prohibited calls seen (test hook) */
extern struct graph graphs[MAXGRAPH];
extern struct gexec gexecs[MAXGRAPH];
extern u64 graph_reserve[FAKE_MAX_DEV], graph_used[FAKE_MAX_DEV], graph_used_high[FAKE_MAX_DEV], graph_reserve_high[FAKE_MAX_DEV];
extern struct phys phys[MAXPHYS];
extern struct map maps[MAXPHYS];
extern int nmaps;

/* the model's helpers and the i_* implementations (the exports call these) */
void fake_init(void);
int proc_gone(int pid);
int same_ns(int i);
void reap_slot(int i);
void reap_dead(void);
int proc_slot(void);
int dev_charge(int dev, u64 n);
void dev_uncharge(int dev, u64 n);
int cur_ctx(void);
int cur_dev_of(void);
u64 new_va(u64 size);
void add_rec(struct rec r);
int track(int kind, int dev, u64 size, u64 *out, int narrow);
void unknown_free(u64 key);
int ctx_new(int dev, int primary);
void ctx_kill(int c);
int ctx_idx(CUcontext h);
void set_current(int c);
int stream_idx(CUstream h);
int stream_dev(CUstream s);
void fake_env(void);
CUresult i_cuInit(unsigned f);
CUresult i_cuDriverGetVersion(int *v);
CUresult i_cuDeviceGetCount(int *n);
CUresult i_cuDeviceGet(CUdevice *d, int o);
void uuid_of(int dev, unsigned char u[16]);
CUresult i_cuDeviceGetUuid(unsigned char *u, CUdevice d);
CUresult i_cuDeviceTotalMem_v2(size_t *b, CUdevice d);
CUresult i_cuDeviceTotalMem(unsigned *b, CUdevice d);
CUresult i_cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d);
CUresult i_cuCtxCreate(CUcontext *c, unsigned f, CUdevice d);
CUresult i_cuCtxCreate_v3(CUcontext *c, void *p, int n, unsigned f, CUdevice d);
CUresult i_cuCtxCreate_v4(CUcontext *c, void *p, unsigned f, CUdevice d);
CUresult i_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult i_cuDevicePrimaryCtxRelease_v2(CUdevice d);
CUresult i_cuDevicePrimaryCtxRelease(CUdevice d);
CUresult i_cuDevicePrimaryCtxReset_v2(CUdevice d);
CUresult i_cuDevicePrimaryCtxReset(CUdevice d);
CUresult i_cuDevicePrimaryCtxGetState(CUdevice d, unsigned *fl, int *active);
CUresult i_cuCtxDestroy_v2(CUcontext c);
CUresult i_cuCtxDestroy(CUcontext c);
CUresult i_cuCtxSetCurrent(CUcontext c);
CUresult i_cuCtxGetCurrent(CUcontext *c);
CUresult i_cuCtxPushCurrent_v2(CUcontext c);
CUresult i_cuCtxPopCurrent_v2(CUcontext *c);
CUresult i_cuCtxGetDevice(CUdevice *d);
CUresult i_cuCtxSynchronize(void);
CUresult i_cuCtxSetLimit(int lim, size_t v);
CUresult i_cuCtxGetLimit(size_t *v, int lim);
CUresult i_cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult i_cuStreamCreate(CUstream *s, unsigned f);
CUresult i_cuStreamDestroy_v2(CUstream s);
CUresult i_cuStreamGetCtx(CUstream s, CUcontext *c);
CUresult i_cuStreamSynchronize(CUstream s);
CUresult i_cuStreamSynchronize_ptsz(CUstream s);
CUresult i_cuEventSynchronize(void *e);
CUresult i_cuPointerGetAttribute(void *data, int attr, CUdeviceptr p);
CUresult i_cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult i_cuMemAlloc(unsigned *p, unsigned n);
CUresult i_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e);
CUresult i_cuMemAllocPitch(unsigned *p, unsigned *pitch, unsigned w, unsigned h, unsigned e);
CUresult i_cuMemFree_v2(CUdeviceptr p);
CUresult i_cuMemFree(unsigned p);
CUresult i_cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f);
/* managed memory (fake_managed.c) */
struct mem_loc { int type, id; }; /* CUmemLocation */
void managed_env(void);
void managed_keep_fd(int fd);
void managed_lock(void);
void managed_unlock(void);
int managed_make_room(int dev, u64 n, u64 *now);
void managed_release_slot(int slot);
void managed_drop(int idx, u64 va);
CUresult i_cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice d);
CUresult i_cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, struct mem_loc loc);
CUresult i_cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s);
CUresult i_cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, struct mem_loc loc, unsigned flags, CUstream s);
u64 fmt_bytes(unsigned f);
CUresult arr_make(u64 bytes, void **h, int kind);
CUresult i_cuArrayCreate_v2(void **h, const struct adesc *d);
CUresult i_cuArrayCreate(void **h, const struct adesc1 *d);
CUresult i_cuArray3DCreate_v2(void **h, const struct a3desc *d);
CUresult i_cuArray3DCreate(void **h, const struct a3desc1 *d);
CUresult i_cuArrayDestroy(void *h);
CUresult i_cuMipmappedArrayCreate(void **h, const struct a3desc *d, unsigned levels);
CUresult i_cuMipmappedArrayDestroy(void *h);
CUresult i_cuMemGetInfo_v2(size_t *fr, size_t *tot);
CUresult i_cuMemGetInfo(unsigned *fr, unsigned *tot);
int pool_idx(void *h);
int pool_new(int dev);
int default_pool(int dev);
u64 gran_up(u64 n);
void pool_shrink(struct pool *p, u64 keep);
void pools_sync(void);
int pool_alloc(int pi, u64 n, u64 *out);
void drop_rec(size_t i);
int untrack(int kind, u64 key);
int need_ctx(void);
CUresult i_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s);
CUresult i_cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s);
CUresult i_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, CUstream s);
CUresult i_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, CUstream s);
CUresult i_cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult i_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
CUresult i_cuMemPoolTrimTo(void *pool, size_t keep);
CUresult i_cuMemPoolCreate(void **pool, const struct pool_props *pp);
CUresult i_cuMemPoolDestroy(void *pool);
CUresult i_cuMemPoolGetAttribute(void *pool, int attr, void *v);
CUresult i_cuMemPoolSetAttribute(void *pool, int attr, void *v);
CUresult i_cuDeviceGetDefaultMemPool(void **pool, CUdevice d);
CUresult i_cuDeviceGetMemPool(void **pool, CUdevice d);
CUresult i_cuDeviceSetMemPool(CUdevice d, void *pool);
int prohibited(void);
void cap_invalidate_prohibiting(void);
int h_idx(void *h, u64 base, int max);
int graph_new(int dev);
int graph_add_alloc(int gi, u64 n, u64 *va);
int graph_add_free(int gi, u64 va);
int cap_of(CUstream s);
int legacy_conflict(CUstream s);
CUresult i_cuGraphCreate(void **g, unsigned f);
CUresult i_cuGraphDestroy(void *g);
CUresult i_cuGraphAddMemAllocNode(void **node, void *g, void *deps, size_t n, void *params);
CUresult i_cuGraphAddMemFreeNode(void **node, void *g, void *deps, size_t n, CUdeviceptr p);
CUresult i_cuGraphInstantiateWithFlags(void **e, void *g, u64 f);
CUresult i_cuGraphExecDestroy(void *e);
CUresult i_cuGraphLaunch(void *e, CUstream s);
void graph_freed(int dev, u64 size, int exec, u64 va);
CUresult i_cuDeviceGetGraphMemAttribute(CUdevice d, int attr, void *v);
CUresult i_cuDeviceGraphMemTrim(CUdevice d);
CUresult i_cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult i_cuStreamBeginCapture(CUstream s);
CUresult i_cuStreamBeginCapture_v2_ptsz(CUstream s, int mode);
CUresult i_cuStreamEndCapture(CUstream s, void **graph);
CUresult i_cuStreamEndCapture_ptsz(CUstream s, void **graph);
CUresult i_cuStreamIsCapturing(CUstream s, int *st);
CUresult i_cuStreamGetCaptureInfo(CUstream s, int *st, unsigned long long *id);
CUresult i_cuStreamGetCaptureInfo_v2(CUstream s, int *st, unsigned long long *id, void **g, const void **deps, size_t *nd);
CUresult i_cuStreamGetCaptureInfo_v3(CUstream s, int *st, unsigned long long *id, void **g, const void **deps, const void **ed, size_t *nd);
CUresult i_cuThreadExchangeStreamCaptureMode(int *mode);
CUresult i_cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned sm, void *s, void **p, void **x);
int phys_of(u64 h);
void phys_maybe_free(int i);
CUresult i_cuMemCreate(u64 *h, size_t n, const struct prop *p, u64 fl);
CUresult i_cuMemRelease(u64 h);
CUresult i_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, u64 fl);
CUresult i_cuMemAddressFree(CUdeviceptr p, size_t size);
CUresult i_cuMemMap(CUdeviceptr va, size_t size, size_t off, u64 h, u64 fl);
CUresult i_cuMemUnmap(CUdeviceptr va, size_t size);
int maps_cover(u64 va, u64 size);
CUresult i_cuMemSetAccess(CUdeviceptr va, size_t size, const struct access_desc *d, size_t count);
CUresult i_cuMemGetAccess(u64 *flags, const struct access_desc *loc, CUdeviceptr p);
CUresult i_cuMemRetainAllocationHandle(u64 *h, void *addr);
CUresult i_cuMemExportToShareableHandle(void *out, u64 h, int type, u64 fl);
CUresult i_cuMemImportFromShareableHandle(u64 *h, void *os, int type);
CUresult i_cuMemGetAllocationGranularity(size_t *g, const void *p, int o);
CUresult i_cuGetProcAddress(const char *s, void **p, int v, u64 f);
CUresult i_cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *st);

#pragma GCC visibility pop
#endif
