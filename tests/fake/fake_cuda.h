/* Shared definitions of the fake driver (tests only). */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H
#include <stdint.h>
#include <stdlib.h>

#define FAKE_MAX_DEV 8
#define FAKE_MAX_PROCS 256

/* Shared across processes through the file named by FAKE_CUDA_PEAK_FILE
   (anonymous, per-process, when unset). */
struct fake_shared {
  uint64_t magic;
  uint64_t in_use[FAKE_MAX_DEV];   /* bytes allocated right now, all processes */
  uint64_t peak[FAKE_MAX_DEV];     /* max of in_use ever seen */
  uint64_t external[FAKE_MAX_DEV]; /* simulated other tenants (fake_cuda_set_external) */
  uint64_t allocs, frees, unknown_frees, refused;
  struct { int32_t pid; int32_t pad; uint64_t used[FAKE_MAX_DEV]; } procs[FAKE_MAX_PROCS];
};
#define FAKE_SHARED_MAGIC 0x4b41464541445543ull

/* Per-process statistics (fake_cuda_stats). */
struct fake_stats {
  uint64_t in_use[FAKE_MAX_DEV], peak[FAKE_MAX_DEV];
  uint64_t allocs, frees, unknown_frees;       /* this process */
  uint64_t shared_unknown_frees, shared_refused;
  uint64_t calls_ptsz;                         /* *_ptsz entry points called */
  uint64_t calls_legacy;                       /* non-_v2 legacy entry points */
  uint64_t last_unknown_free;                  /* pointer value */
  uint64_t gpa_calls;
  /* appended (issue 9): the driver-side lifetimes */
  uint64_t contexts_live;                      /* contexts of this process */
  uint64_t vmm_phys_live;                      /* physical VMM allocations alive */
  uint64_t pool_reserved[FAKE_MAX_DEV];        /* all pools of the device */
  uint64_t pool_used[FAKE_MAX_DEV];
  /* appended (issue 13) */
  uint64_t set_access;                         /* successful cuMemSetAccess calls */
};
/* FAKE_CUDA_MEM_BYTES: one size, or "A,B,..." (device i the i-th, the
   last repeating); shared by the fake libcuda and the fake NVML */
static inline void fake_mem_sizes(const char *e, unsigned long long out[FAKE_MAX_DEV]) {
  unsigned long long v = 0;
  for (int i = 0; i < FAKE_MAX_DEV; i++) {
    if (e && *e) { char *end; v = strtoull(e, &end, 0); e = *end == ',' ? end + 1 : 0; }
    out[i] = v;
  }
}
#endif
