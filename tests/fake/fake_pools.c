/* The fake libcuda.so.1 (tests/fake/fake_cuda.c): stream-ordered memory pools: the model and the cuMemPool and cuMemAllocAsync entry points. */
#include "fake_cuda_internal.h"

/* ------------------------------------------------------------ pools */
struct pool pools[MAXPOOL];
int cur_pool[FAKE_MAX_DEV] = {-1, -1, -1, -1, -1, -1, -1, -1};
int def_pool[FAKE_MAX_DEV] = {-1, -1, -1, -1, -1, -1, -1, -1};
int pool_idx(void *h) { u64 v = (u64)h; if (v < 0x900000ull || (v - 0x900000ull) % 0x100) return -1; u64 i = (v - 0x900000ull) / 0x100; return i < MAXPOOL && pools[i].live ? (int)i : -1; }
int pool_new(int dev) { for (int i = 0; i < MAXPOOL; i++) if (!pools[i].live) { pools[i] = (struct pool){1, dev, 0, 0, 0, 0}; return i; } return -1; }
int default_pool(int dev) { if (def_pool[dev] < 0) def_pool[dev] = pool_new(dev); if (cur_pool[dev] < 0) cur_pool[dev] = def_pool[dev]; return def_pool[dev]; }
u64 gran_up(u64 n) { return (n + g_pool_gran - 1) / g_pool_gran * g_pool_gran; }
/* give back reserved memory above max(used, keep) (mu held) */
void pool_shrink(struct pool *p, u64 keep) {
  u64 target = p->used > keep ? p->used : keep;
  if (target >= p->reserved) return;
  target = gran_up(target);
  if (p->reserved > target) { dev_uncharge(p->dev, p->reserved - target); p->reserved = target; }
}
void pools_sync(void) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXPOOL; i++) if (pools[i].live) pool_shrink(&pools[i], pools[i].threshold);
  pthread_mutex_unlock(&mu);
}
int pool_alloc(int pi, u64 n, u64 *out) {
  int r = OK;
  pthread_mutex_lock(&mu);
  struct pool *p = &pools[pi];
  if (p->reserved - p->used < n) {
    u64 grow = gran_up(n - (p->reserved - p->used));
    r = dev_charge(p->dev, grow);
    if (r == OK) p->reserved += grow;
  }
  if (r == OK) {
    p->used += n;
    u64 k = new_va(n);
    add_rec((struct rec){k, n, p->dev, K_POOL, cur_ctx(), pi});
    ST.allocs++;
    *out = k;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

void graph_freed(int dev, u64 size, int exec, u64 va);
/* free a record (mu held) */
void drop_rec(size_t i) {
  struct rec *r = &recs[i];
  if (r->kind == K_GRAPH) {
    graph_freed(r->dev, r->size, r->pool, r->key); /* back to the graph pool's reserve */
  } else if (r->kind == K_POOL) {
    struct pool *p = &pools[r->pool];
    p->used -= r->size;
    if (p->destroyed) pool_shrink(p, 0);
    if (p->destroyed && p->used == 0) p->live = 0;
  } else if (r->kind == K_MANAGED) {
    managed_drop(r->pool, r->key); /* its resident and host bytes */
  } else {
    dev_uncharge(r->dev, r->size);
  }
  recs[i] = recs[--nrec];
  ST.frees++;
}

int untrack(int kind, u64 key) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec; i++) {
    if (recs[i].key == key && (recs[i].kind == kind || (kind == K_PTR && (recs[i].kind == K_POOL || recs[i].kind == K_GRAPH || recs[i].kind == K_MANAGED)))) {
      if (g_fail_next_free) { g_fail_next_free = 0; pthread_mutex_unlock(&mu); return 700; /* ILLEGAL_ADDRESS */ }
      drop_rec(i);
      pthread_mutex_unlock(&mu);
      return OK;
    }
  }
  unknown_free(key);
  pthread_mutex_unlock(&mu);
  return INVALID_VALUE;
}

int need_ctx(void) { return cur_dev < 0 ? INVALID_CONTEXT : OK; }

CUresult i_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
  CHECK_INIT(); if (!p || !n) return INVALID_VALUE;
  int d = stream_dev(s); if (d < 0) return INVALID_CONTEXT;
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s);
  if (ci >= 0) { /* a memory node of the capture's graph */
    if (caps[ci].invalid) return E_CAP_INVALIDATED;
    pthread_mutex_lock(&mu); u64 va; int r = graph_add_alloc(caps[ci].graph, n, &va); pthread_mutex_unlock(&mu);
    if (r == OK) *p = va; return r;
  }
  pthread_mutex_lock(&mu); default_pool(d); int pi = cur_pool[d]; pthread_mutex_unlock(&mu);
  u64 k; int r = pool_alloc(pi, n, &k); if (r == OK) *p = k; return r;
}
CUresult i_cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { ST.calls_ptsz++; return i_cuMemAllocAsync(p, n, s); }
CUresult i_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, CUstream s) {
  CHECK_INIT(); if (!p || !n) return INVALID_VALUE; if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  int pi = pool_idx(pool); if (pi < 0 || pools[pi].destroyed) return INVALID_VALUE;
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s);
  if (ci >= 0) {
    if (caps[ci].invalid) return E_CAP_INVALIDATED;
    pthread_mutex_lock(&mu); u64 va; int r = graph_add_alloc(caps[ci].graph, n, &va); pthread_mutex_unlock(&mu);
    if (r == OK) *p = va; return r;
  }
  u64 k; int r = pool_alloc(pi, n, &k); if (r == OK) *p = k; return r;
}
CUresult i_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, CUstream s) { ST.calls_ptsz++; return i_cuMemAllocFromPoolAsync(p, n, pool, s); }
CUresult i_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  CHECK_INIT();
  if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); return E_CAP_IMPLICIT; }
  int ci = cap_of(s);
  if (ci >= 0) { /* a free node: of the graph's own allocation (else left to the caller: unsupported here) */
    if (caps[ci].invalid) return E_CAP_INVALIDATED;
    pthread_mutex_lock(&mu); int r = graph_add_free(caps[ci].graph, p); pthread_mutex_unlock(&mu);
    if (r != OK) caps[ci].invalid = 1;
    return r;
  }
  return untrack(K_PTR, p);
}
CUresult i_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { ST.calls_ptsz++; return i_cuMemFreeAsync(p, s); }
CUresult i_cuMemPoolTrimTo(void *pool, size_t keep) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0) return INVALID_VALUE; UNSAFE_CALL();
  pthread_mutex_lock(&mu); pool_shrink(&pools[pi], keep); pthread_mutex_unlock(&mu); return OK;
}
CUresult i_cuMemPoolCreate(void **pool, const struct pool_props *pp) {
  CHECK_INIT(); if (!pool || !pp || pp->loc_type != 1 || pp->loc_id < 0 || pp->loc_id >= g_ndev) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int i = pool_new(pp->loc_id); pthread_mutex_unlock(&mu);
  if (i < 0) return OOM; *pool = POOL_H(i); return OK;
}
CUresult i_cuMemPoolDestroy(void *pool) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0 || pools[pi].destroyed) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  pools[pi].destroyed = 1; pool_shrink(&pools[pi], 0);
  if (pools[pi].used == 0) pools[pi].live = 0;
  for (int d = 0; d < FAKE_MAX_DEV; d++) if (cur_pool[d] == pi) cur_pool[d] = def_pool[d];
  pthread_mutex_unlock(&mu);
  return OK;
}
CUresult i_cuMemPoolGetAttribute(void *pool, int attr, void *v) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0 || !v) return INVALID_VALUE; UNSAFE_CALL();
  struct pool *p = &pools[pi];
  switch (attr) {
    case 4: *(u64 *)v = p->threshold; return OK;   /* RELEASE_THRESHOLD */
    case 5: *(u64 *)v = p->reserved; return OK;    /* RESERVED_MEM_CURRENT */
    case 7: *(u64 *)v = p->used; return OK;        /* USED_MEM_CURRENT */
    default: return INVALID_VALUE;
  }
}
CUresult i_cuMemPoolSetAttribute(void *pool, int attr, void *v) {
  CHECK_INIT(); int pi = pool_idx(pool); if (pi < 0 || !v) return INVALID_VALUE;
  if (attr != 4) return INVALID_VALUE;
  pools[pi].threshold = *(u64 *)v; return OK;
}
CUresult i_cuDeviceGetDefaultMemPool(void **pool, CUdevice d) {
  CHECK_INIT(); if (!pool) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  pthread_mutex_lock(&mu); int i = default_pool(d); pthread_mutex_unlock(&mu); *pool = POOL_H(i); return OK;
}
CUresult i_cuDeviceGetMemPool(void **pool, CUdevice d) {
  CHECK_INIT(); if (!pool) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  pthread_mutex_lock(&mu); default_pool(d); int i = cur_pool[d]; pthread_mutex_unlock(&mu); *pool = POOL_H(i); return OK;
}
CUresult i_cuDeviceSetMemPool(CUdevice d, void *pool) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE; int pi = pool_idx(pool); if (pi < 0 || pools[pi].dev != d) return INVALID_VALUE;
  cur_pool[d] = pi; return OK;
}
