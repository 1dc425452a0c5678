/* The fake libcuda.so.1 (tests/fake/fake_cuda.c): the virtual memory management API (cuMemCreate/Map/SetAccess/...): physical allocations, mappings, access. */
#include "fake_cuda_internal.h"

/* ------------------------------------------------------------ VMM */
struct phys phys[MAXPHYS];
struct map maps[MAXPHYS]; int nmaps;
int phys_of(u64 h) { for (int i = 0; i < MAXPHYS; i++) if (phys[i].live && phys[i].handle == h && phys[i].refs > 0) return i; return -1; }
void phys_maybe_free(int i) {
  if (phys[i].refs == 0 && phys[i].maps == 0) {
    if (phys[i].dev >= 0) dev_uncharge(phys[i].dev, phys[i].size);
    phys[i].live = 0;
    ST.vmm_phys_live--;
  }
}

CUresult i_cuMemCreate(u64 *h, size_t n, const struct prop *p, u64 fl) {
  CHECK_INIT(); if (!h || !p || !n || fl) return INVALID_VALUE; /* flags: reserved, must be 0 */
  if (n % (2u << 20)) return INVALID_VALUE; /* granularity 2 MiB */
  UNSAFE_CALL();
  int dev = -1;
  if (p->loc_type == 1) { if (p->loc_id < 0 || p->loc_id >= g_ndev) return INVALID_DEVICE; dev = p->loc_id; }
  pthread_mutex_lock(&mu);
  int i; for (i = 0; i < MAXPHYS && phys[i].live; i++) {}
  int r = i == MAXPHYS ? OOM : dev >= 0 ? dev_charge(dev, n) : OK; /* host memory: no device charge */
  if (r == OK) { phys[i] = (struct phys){1, dev, 1, 0, n, (next_handle += 16)}; *h = phys[i].handle; ST.vmm_phys_live++; ST.allocs++; }
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult i_cuMemRelease(u64 h) {
  CHECK_INIT(); pthread_mutex_lock(&mu);
  int i = phys_of(h);
  if (i < 0) { unknown_free(h); pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  phys[i].refs--; phys_maybe_free(i);
  pthread_mutex_unlock(&mu); return OK;
}
CUresult i_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, u64 fl) {
  (void)align; (void)addr; (void)fl; CHECK_INIT(); if (!p || !size) return INVALID_VALUE;
  pthread_mutex_lock(&mu); *p = new_va(size); pthread_mutex_unlock(&mu); return OK;
}
CUresult i_cuMemAddressFree(CUdeviceptr p, size_t size) { (void)p; (void)size; CHECK_INIT(); return OK; }
CUresult i_cuMemMap(CUdeviceptr va, size_t size, size_t off, u64 h, u64 fl) {
  (void)fl; CHECK_INIT(); if (off != 0 || !size) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  int i = phys_of(h);
  if (i < 0 || size > phys[i].size || nmaps == MAXPHYS) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  maps[nmaps++] = (struct map){va, size, i, {0}}; phys[i].maps++;
  pthread_mutex_unlock(&mu); return OK;
}
CUresult i_cuMemUnmap(CUdeviceptr va, size_t size) {
  CHECK_INIT(); pthread_mutex_lock(&mu);
  int found = 0;
  for (int k = 0; k < nmaps;) {
    if (maps[k].va >= va && maps[k].va + maps[k].size <= va + size) {
      int i = maps[k].ph; phys[i].maps--; phys_maybe_free(i); maps[k] = maps[--nmaps]; found = 1;
    } else k++;
  }
  pthread_mutex_unlock(&mu);
  return found ? OK : INVALID_VALUE;
}
/* cuMemSetAccess: like the driver, the range must be mapped completely,
   every descriptor names a device location, and setting access (for the
   owning device or a peer) allocates nothing. */
int maps_cover(u64 va, u64 size) {
  u64 cur = va, end = va + size;
  while (cur < end) {
    int k; for (k = 0; k < nmaps; k++) if (maps[k].va == cur) break;
    if (k == nmaps) return 0;
    cur += maps[k].size;
  }
  return 1;
}
CUresult i_cuMemSetAccess(CUdeviceptr va, size_t size, const struct access_desc *d, size_t count) {
  CHECK_INIT(); if (!d || !count || !size) return INVALID_VALUE;
  for (size_t j = 0; j < count; j++) {
    if (d[j].loc_type != 1) return INVALID_VALUE;
    if (d[j].loc_id < 0 || d[j].loc_id >= g_ndev) return INVALID_DEVICE;
    if (d[j].flags > 3 || d[j].flags == 2) return INVALID_VALUE;
  }
  pthread_mutex_lock(&mu);
  if (!maps_cover(va, size)) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  for (int k = 0; k < nmaps; k++)
    if (maps[k].va >= va && maps[k].va + maps[k].size <= va + size)
      for (size_t j = 0; j < count; j++) maps[k].access[d[j].loc_id] = d[j].flags;
  ST.set_access++;
  pthread_mutex_unlock(&mu); return OK;
}
CUresult i_cuMemGetAccess(u64 *flags, const struct access_desc *loc, CUdeviceptr p) {
  CHECK_INIT(); if (!flags || !loc || loc->loc_type != 1) return INVALID_VALUE;
  if (loc->loc_id < 0 || loc->loc_id >= g_ndev) return INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  for (int k = 0; k < nmaps; k++) if (p >= maps[k].va && p < maps[k].va + maps[k].size) {
    *flags = maps[k].access[loc->loc_id]; pthread_mutex_unlock(&mu); return OK;
  }
  pthread_mutex_unlock(&mu); return INVALID_VALUE;
}
CUresult i_cuMemRetainAllocationHandle(u64 *h, void *addr) {
  CHECK_INIT(); if (!h) return INVALID_VALUE; u64 a = (u64)addr;
  pthread_mutex_lock(&mu);
  for (int k = 0; k < nmaps; k++) if (a >= maps[k].va && a < maps[k].va + maps[k].size) {
    struct phys *ph = &phys[maps[k].ph]; ph->refs++; *h = ph->handle; pthread_mutex_unlock(&mu); return OK;
  }
  pthread_mutex_unlock(&mu); return INVALID_VALUE;
}
CUresult i_cuMemExportToShareableHandle(void *out, u64 h, int type, u64 fl) {
  (void)type; (void)fl; CHECK_INIT(); if (!out) return INVALID_VALUE;
  pthread_mutex_lock(&mu); int i = phys_of(h); pthread_mutex_unlock(&mu);
  if (i < 0) return INVALID_VALUE; *(int *)out = 1000 + i; return OK;
}
/* an import (of this process's export) is one more reference to the same memory */
CUresult i_cuMemImportFromShareableHandle(u64 *h, void *os, int type) {
  (void)type; CHECK_INIT(); if (!h) return INVALID_VALUE; long i = (long)os - 1000;
  pthread_mutex_lock(&mu);
  if (i < 0 || i >= MAXPHYS || !phys[i].live) { pthread_mutex_unlock(&mu); return INVALID_VALUE; }
  phys[i].refs++; *h = phys[i].handle; pthread_mutex_unlock(&mu); return OK;
}
CUresult i_cuMemGetAllocationGranularity(size_t *g, const void *p, int o) { (void)p; (void)o; if (!g) return INVALID_VALUE; *g = 2u << 20; return OK; }
