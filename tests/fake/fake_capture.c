/* The fake libcuda.so.1 (tests/fake/fake_cuda.c): stream capture (the driver's capture rules) and graph memory: the model and the cuStream...Capture and cuGraph... entry points. */
#include "fake_cuda_internal.h"

/* ------------------------------------------------------------ stream capture */
/* Modelled on the driver's documented rules (cuStreamBeginCapture,
   CUstreamCaptureMode): a thread whose interaction mode is GLOBAL is
   prohibited from "potentially unsafe" calls while it has a non-relaxed
   capture of its own or any other thread has a GLOBAL one; THREAD_LOCAL:
   only its own; RELAXED: never. A prohibited call fails with
   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that
   prohibit it; cuStreamEndCapture of an invalidated capture then fails with
   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. Which calls are unsafe the
   documentation does not list: the fake takes the strict side (allocation,
   free, memory-info, synchronising, pool-attribute, pool-trim, graph-memory
   attribute and trim calls); synchronising the capturing stream or using
   the legacy stream during a capture invalidates it too. Stream-ordered
   allocations and frees on a capturing stream become graph memory nodes:
   no memory until the graph is launched. */
struct cap caps[64];
int n_caps_global; /* active GLOBAL-mode captures, all threads */
__thread int t_caps_own; /* this thread's active non-relaxed captures */
__thread int t_caps_own_global;
__thread int t_mode; /* CAP_GLOBAL (0) by default */
unsigned long long cap_next_id = 1;
u64 capture_violations; /* prohibited calls seen (test hook) */
int prohibited(void) {
  if (t_mode == CAP_RELAXED) return 0;
  if (t_caps_own > 0) return 1;
  return t_mode == CAP_GLOBAL && __atomic_load_n(&n_caps_global, __ATOMIC_SEQ_CST) - t_caps_own_global > 0;
}
void cap_invalidate_prohibiting(void) {
  pthread_t me = pthread_self();
  for (int i = 0; i < 64; i++)
    if (caps[i].active && caps[i].mode != CAP_RELAXED && (caps[i].mode == CAP_GLOBAL || pthread_equal(caps[i].owner, me)))
      caps[i].invalid = 1;
}
/* an unsafe call: refused (and the capture broken) while prohibited */

/* graphs: a graph holds memory-node allocations (alloc nodes, captured
   stream-ordered allocations) and notes those it frees itself (free nodes).
   At launch the device's graph memory pool reserves what the graph needs on
   top of what earlier launches left allocated; the allocations the graph
   does not free stay allocated (cuMemFree/cuMemFreeAsync outside frees them)
   and the reserve stays until cuDeviceGraphMemTrim gives back what no
   allocation uses. A graph whose allocations are still live cannot be
   launched again (CUDA_ERROR_INVALID_VALUE). */
struct graph graphs[MAXGRAPH];
struct gexec gexecs[MAXGRAPH];
u64 graph_reserve[FAKE_MAX_DEV], graph_used[FAKE_MAX_DEV], graph_used_high[FAKE_MAX_DEV], graph_reserve_high[FAKE_MAX_DEV];
int h_idx(void *h, u64 base, int max) { u64 v = (u64)h; if (v < base || (v - base) % 0x40) return -1; u64 i = (v - base) / 0x40; return i < (u64)max ? (int)i : -1; }
int graph_new(int dev) { for (int i = 0; i < MAXGRAPH; i++) if (!graphs[i].live) { graphs[i] = (struct graph){1, dev, 0, {{0}}}; return i; } return -1; }
/* a memory node of n bytes in graph gi (mu held): its virtual address */
int graph_add_alloc(int gi, u64 n, u64 *va) {
  struct graph *g = &graphs[gi];
  if (g->n == MAXGALLOC) return OOM;
  u64 k = new_va(n);
  g->a[g->n++] = (struct galloc){k, (n + g_pool_gran - 1) / g_pool_gran * g_pool_gran, 0};
  *va = k; return OK;
}
/* a free node in graph gi of va (mu held): the graph's own allocation */
int graph_add_free(int gi, u64 va) {
  struct graph *g = &graphs[gi];
  for (int j = 0; j < g->n; j++) if (g->a[j].va == va && !g->a[j].freed) { g->a[j].freed = 1; return OK; }
  return INVALID_VALUE;
}
/* the capture of a stream, if any (-1) */
int cap_of(CUstream s) {
  if ((u64)s <= 2) return -1;
  u64 v = (u64)s; if (v < 0x700000ull || (v - 0x700000ull) % 0x40) return -1;
  u64 i = (v - 0x700000ull) / 0x40; return i < 64 && caps[i].active ? (int)i : -1;
}
/* legacy-stream work while a capture that it would join is active */
int legacy_conflict(CUstream s) {
  if ((u64)s > 1) return 0;
  if (t_mode == CAP_RELAXED) return 0;
  for (int i = 0; i < 64; i++) if (caps[i].active && caps[i].mode != CAP_RELAXED) return 1;
  return 0;
}

CUresult i_cuGraphCreate(void **g, unsigned f) {
  (void)f; CHECK_INIT(); if (!g) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int i = graph_new(cur_dev < 0 ? 0 : cur_dev); pthread_mutex_unlock(&mu);
  if (i < 0) return OOM; *g = GRAPH_H(i); return OK;
}
CUresult i_cuGraphDestroy(void *g) {
  CHECK_INIT(); int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  graphs[i].live = 0; return OK;
}
/* CUDA_MEM_ALLOC_NODE_PARAMS: poolProps.location at 8/12, bytesize at 104, dptr (out) at 112 */
CUresult i_cuGraphAddMemAllocNode(void **node, void *g, void *deps, size_t n, void *params) {
  (void)deps; (void)n; CHECK_INIT(); if (!node || !params) return INVALID_VALUE;
  int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  u64 b = *(size_t *)((char *)params + 104); if (!b) return INVALID_VALUE;
  int loc = *(int *)((char *)params + 12); if (*(int *)((char *)params + 8) != 1 || loc < 0 || loc >= g_ndev) return INVALID_VALUE;
  pthread_mutex_lock(&mu); graphs[i].dev = loc; u64 va; int r = graph_add_alloc(i, b, &va); pthread_mutex_unlock(&mu);
  if (r) return r;
  *(u64 *)((char *)params + 112) = va; *node = (void *)(0x1234 + va); return OK;
}
CUresult i_cuGraphAddMemFreeNode(void **node, void *g, void *deps, size_t n, CUdeviceptr p) {
  (void)deps; (void)n; CHECK_INIT(); if (!node) return INVALID_VALUE;
  int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int r = graph_add_free(i, p); pthread_mutex_unlock(&mu);
  if (r == OK) *node = (void *)(0x5678 + p); return r;
}
CUresult i_cuGraphInstantiateWithFlags(void **e, void *g, u64 f) {
  (void)f; CHECK_INIT(); if (!e) return INVALID_VALUE; int i = h_idx(g, 0xa00000ull, MAXGRAPH); if (i < 0 || !graphs[i].live) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  int x; for (x = 0; x < MAXGRAPH && gexecs[x].live; x++) {}
  if (x == MAXGRAPH) { pthread_mutex_unlock(&mu); return OOM; }
  gexecs[x].live = 1; gexecs[x].dev = graphs[i].dev; gexecs[x].n = graphs[i].n; gexecs[x].outstanding = 0;
  memcpy(gexecs[x].a, graphs[i].a, sizeof graphs[i].a);
  pthread_mutex_unlock(&mu);
  *e = EXEC_H(x); return OK;
}
CUresult i_cuGraphExecDestroy(void *e) {
  CHECK_INIT(); int i = h_idx(e, 0xb00000ull, MAXGRAPH); if (i < 0 || !gexecs[i].live) return INVALID_VALUE;
  gexecs[i].live = 0; return OK; /* allocations it left live stay allocated */
}
CUresult i_cuGraphLaunch(void *e, CUstream s) {
  CHECK_INIT(); int i = h_idx(e, 0xb00000ull, MAXGRAPH); if (i < 0 || !gexecs[i].live) return INVALID_VALUE;
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  if (cap_of(s) >= 0) return OK; /* launched into a capture: a child graph node (no memory now) */
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  struct gexec *x = &gexecs[i];
  int d = x->dev;
  pthread_mutex_lock(&mu);
  if (x->outstanding) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  u64 total = 0, kept = 0;
  for (int j = 0; j < x->n; j++) { total += x->a[j].size; if (!x->a[j].freed) kept += x->a[j].size; }
  u64 need = graph_used[d] + total;
  int r = OK;
  if (need > graph_reserve[d]) { r = dev_charge(d, need - graph_reserve[d]); if (r == OK) graph_reserve[d] = need; }
  if (r == OK && kept) {
    graph_used[d] += kept;
    for (int j = 0; j < x->n; j++) if (!x->a[j].freed) add_rec((struct rec){x->a[j].va, x->a[j].size, d, K_GRAPH, -1, i});
    x->outstanding = 1;
  }
  if (graph_used[d] > graph_used_high[d]) graph_used_high[d] = graph_used[d];
  if (graph_reserve[d] > graph_reserve_high[d]) graph_reserve_high[d] = graph_reserve[d];
  pthread_mutex_unlock(&mu);
  return r;
}
/* a live graph allocation was freed (mu held): the reserve keeps it */
void graph_freed(int dev, u64 size, int exec, u64 va) {
  graph_used[dev] -= size < graph_used[dev] ? size : graph_used[dev];
  int more = 0;
  for (size_t k = 0; k < nrec; k++) if (recs[k].kind == K_GRAPH && recs[k].pool == exec && recs[k].key != va) more = 1;
  if (!more && exec >= 0 && exec < MAXGRAPH) gexecs[exec].outstanding = 0;
}
CUresult i_cuDeviceGetGraphMemAttribute(CUdevice d, int attr, void *v) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE; if (!v) return INVALID_VALUE;
  UNSAFE_CALL();
  switch (attr) {
    case 0: *(u64 *)v = graph_used[d]; return OK;         /* USED_MEM_CURRENT */
    case 1: *(u64 *)v = graph_used_high[d]; return OK;    /* USED_MEM_HIGH */
    case 2: *(u64 *)v = graph_reserve[d]; return OK;      /* RESERVED_MEM_CURRENT */
    case 3: *(u64 *)v = graph_reserve_high[d]; return OK; /* RESERVED_MEM_HIGH */
    default: return INVALID_VALUE;
  }
}
CUresult i_cuDeviceGraphMemTrim(CUdevice d) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  UNSAFE_CALL();
  pthread_mutex_lock(&mu);
  if (graph_reserve[d] > graph_used[d]) { dev_uncharge(d, graph_reserve[d] - graph_used[d]); graph_reserve[d] = graph_used[d]; }
  pthread_mutex_unlock(&mu);
  return OK;
}

/* capture entry points */
CUresult i_cuStreamBeginCapture_v2(CUstream s, int mode) {
  CHECK_INIT(); if (mode < 0 || mode > 2) return INVALID_VALUE;
  if ((u64)s <= 1) return E_CAP_UNSUPPORTED; /* the legacy stream cannot be captured */
  int si = stream_idx(s); if (si < 0) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  if (caps[si].active) { pthread_mutex_unlock(&mu); return E_ILLEGAL_STATE; }
  int g = graph_new(ctxs[stream_ctx[si]].dev);
  if (g < 0) { pthread_mutex_unlock(&mu); return OOM; }
  caps[si] = (struct cap){1, mode, 0, g, pthread_self(), cap_next_id++};
  if (mode != CAP_RELAXED) t_caps_own++;
  if (mode == CAP_GLOBAL) { t_caps_own_global++; __atomic_fetch_add(&n_caps_global, 1, __ATOMIC_SEQ_CST); }
  pthread_mutex_unlock(&mu);
  return OK;
}
CUresult i_cuStreamBeginCapture(CUstream s) { return i_cuStreamBeginCapture_v2(s, CAP_GLOBAL); }
CUresult i_cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { ST.calls_ptsz++; return i_cuStreamBeginCapture_v2(s, mode); }
CUresult i_cuStreamEndCapture(CUstream s, void **graph) {
  CHECK_INIT(); if (!graph) return INVALID_VALUE;
  int ci = cap_of(s); if (ci < 0) return E_ILLEGAL_STATE;
  struct cap *c = &caps[ci];
  if (c->mode != CAP_RELAXED && !pthread_equal(c->owner, pthread_self())) { c->invalid = 1; return E_CAP_WRONG_THREAD; }
  pthread_mutex_lock(&mu);
  c->active = 0;
  if (c->mode != CAP_RELAXED) t_caps_own--;
  if (c->mode == CAP_GLOBAL) { t_caps_own_global--; __atomic_fetch_sub(&n_caps_global, 1, __ATOMIC_SEQ_CST); }
  int inv = c->invalid;
  if (inv) graphs[c->graph].live = 0;
  pthread_mutex_unlock(&mu);
  if (inv) { *graph = 0; return E_CAP_INVALIDATED; }
  *graph = GRAPH_H(c->graph); return OK;
}
CUresult i_cuStreamEndCapture_ptsz(CUstream s, void **graph) { ST.calls_ptsz++; return i_cuStreamEndCapture(s, graph); }
/* CUstreamCaptureStatus: NONE 0, ACTIVE 1, INVALIDATED 2 */
CUresult i_cuStreamIsCapturing(CUstream s, int *st) {
  CHECK_INIT(); if (!st) return INVALID_VALUE;
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  if ((u64)s <= 1 && legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s); *st = ci < 0 ? 0 : caps[ci].invalid ? 2 : 1; return OK;
}
CUresult i_cuStreamGetCaptureInfo(CUstream s, int *st, unsigned long long *id) {
  int x; CUresult r = i_cuStreamIsCapturing(s, &x); if (r) return r;
  if (st) *st = x; if (id && x) *id = caps[cap_of(s)].id; return OK;
}
CUresult i_cuStreamGetCaptureInfo_v2(CUstream s, int *st, unsigned long long *id, void **g, const void **deps, size_t *nd) {
  int x; CUresult r = i_cuStreamIsCapturing(s, &x); if (r) return r;
  if (st) *st = x;
  if (x) { int ci = cap_of(s); if (id) *id = caps[ci].id; if (g) *g = GRAPH_H(caps[ci].graph); }
  if (deps) *deps = 0; if (nd) *nd = 0; return OK;
}
CUresult i_cuStreamGetCaptureInfo_v3(CUstream s, int *st, unsigned long long *id, void **g, const void **deps, const void **ed, size_t *nd) {
  if (ed) *ed = 0; return i_cuStreamGetCaptureInfo_v2(s, st, id, g, deps, nd);
}
CUresult i_cuThreadExchangeStreamCaptureMode(int *mode) {
  if (!mode || *mode < 0 || *mode > 2) return INVALID_VALUE;
  int old = t_mode; t_mode = *mode; *mode = old; return OK;
}
CUresult i_cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned sm, void *s, void **p, void **x) {
  (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)sm; (void)s; (void)p; (void)x; return OK;
}
