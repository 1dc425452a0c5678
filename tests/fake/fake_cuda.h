/* Shared definitions of the fake driver (tests only). */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H
#include <stdint.h>
#include <stdlib.h>

#define FAKE_MAX_DEV 8
#define FAKE_MAX_PROCS 256
#define FAKE_EVICT_RING 64
#define FAKE_MAX_MANAGED 4096

/* Shared across processes through the registry file (fake_registry_open):
   the one FAKE_CUDA_PEAK_FILE names, else fake-gpu-registry beside the
   library when it exists (a process with an empty environment, such as
   gpu-quota's helper child, finds it there); anonymous, per-process, when
   neither. As on a real driver, every process's device memory is known
   host-wide: a process's slot names it by its pid in its own pid namespace
   and that namespace (pidns), and the fake NVML reports it by the pid the
   caller's namespace gives it. */
struct fake_shared {
  uint64_t magic;
  uint64_t in_use[FAKE_MAX_DEV];   /* bytes allocated right now, all processes */
  uint64_t peak[FAKE_MAX_DEV];     /* max of in_use ever seen */
  uint64_t external[FAKE_MAX_DEV]; /* simulated other tenants (fake_cuda_set_external) */
  uint64_t allocs, frees, unknown_frees, refused;
  /* pid: in the process's own pid namespace (getpid()); 0 free, < 0 being
     claimed or reclaimed. pidns: the low 32 bits of that namespace's inode
     (fake_pidns), 0 when not known (a record of an older fake). */
  struct { int32_t pid; uint32_t pidns; uint64_t used[FAKE_MAX_DEV]; } procs[FAKE_MAX_PROCS];
  /* appended: managed memory (fake_managed.c). An allocation of
     cuMemAllocManaged holds device memory only where resident (placed by a
     prefetch to the device); ordinary allocations that do not fit evict
     resident managed bytes of any process, earliest placed first, to the
     host. Changed only under the registry's managed lock (fake_managed.c);
     read without it. procs[].used never counts managed bytes (NVML's
     per-process figure excludes them, as on the H200); in_use[] does. */
  uint64_t managed_seq;                       /* the last placement's sequence number */
  uint64_t managed_resident[FAKE_MAX_DEV];    /* resident managed bytes, all processes (in in_use) */
  uint64_t managed_host;                      /* managed bytes moved to the host, all processes */
  uint64_t evictions;                         /* eviction records ever written (evict[] holds the last FAKE_EVICT_RING) */
  uint64_t evicted_bytes;                     /* bytes ever evicted */
  struct { uint64_t resident[FAKE_MAX_DEV]; uint64_t host; } mprocs[FAKE_MAX_PROCS]; /* per slot of procs[] */
  /* record i lies at evict[i % FAKE_EVICT_RING] */
  struct fake_evict { int32_t victim_pid; uint32_t victim_pidns; int32_t evictor_pid; uint32_t evictor_pidns;
                      int32_t dev; int32_t pad; uint64_t bytes; } evict[FAKE_EVICT_RING];
  /* live managed allocations. slot: the owner's procs[] index (-1 none);
     dev: where its resident bytes are (-1: none placed yet); pref: the
     preferred location of cuMemAdvise (-1 host, -2 none); seq: when its
     resident bytes were last placed (managed_seq) */
  struct fake_managed { int32_t live, slot, dev, pref; uint64_t va, size, resident, host, seq; } managed[FAKE_MAX_MANAGED];
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
  /* appended: the driver-side lifetimes */
  uint64_t contexts_live;                      /* contexts of this process */
  uint64_t vmm_phys_live;                      /* physical VMM allocations alive */
  uint64_t pool_reserved[FAKE_MAX_DEV];        /* all pools of the device */
  uint64_t pool_used[FAKE_MAX_DEV];
  /* appended */
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

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <dlfcn.h>

/* This process's pid namespace (low 32 bits of its inode); 0 if unknown. */
static inline uint32_t fake_pidns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* `name` beside the library that holds `sym` into out; 0 when not found. */
static inline int fake_beside(const void *sym, const char *name, char *out, size_t n) {
  Dl_info di;
  if (!dladdr(sym, &di) || !di.dli_fname) return 0;
  snprintf(out, n, "%s", di.dli_fname);
  char *sl = strrchr(out, '/');
  if (!sl) return 0;
  snprintf(sl + 1, n - (size_t)(sl + 1 - out), "%s", name);
  return 1;
}

/* The registry's descriptor (-1: none): FAKE_CUDA_PEAK_FILE, created when
   missing, else fake-gpu-registry beside the library of `sym` when that
   file exists. */
static inline int fake_registry_open(const void *sym) {
  const char *pf = getenv("FAKE_CUDA_PEAK_FILE");
  if (pf && *pf) return open(pf, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  char p[4096];
  if (!fake_beside(sym, "fake-gpu-registry", p, sizeof p)) return -1;
  return open(p, O_RDWR | O_CLOEXEC);
}
#include <dirent.h>
/* The pid, in the caller's pid namespace, of the process whose pid is `pid`
   in namespace `ns` (fake_pidns); 0 when no process the caller can see is
   that one (gone, or outside the caller's namespace). By each visible
   process's pid-namespace inode and the last field of its NSpid line (its
   pid in its own, innermost namespace). */
static inline int fake_caller_pid_of(int pid, unsigned ns) {
  if (ns == 0 || ns == fake_pidns()) return pid;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e; int found = 0;
  while (!found && (e = readdir(d))) {
    char *end; long hp = strtol(e->d_name, &end, 10);
    if (*end || hp <= 0) continue;
    char p[64], line[512]; struct stat st;
    snprintf(p, sizeof p, "/proc/%ld/ns/pid", hp);
    if (stat(p, &st) != 0 || (unsigned)st.st_ino != ns) continue;
    snprintf(p, sizeof p, "/proc/%ld/status", hp);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "NSpid:", 6)) continue;
      char *last = 0, *tok = strtok(line + 6, " \t\n");
      while (tok) { last = tok; tok = strtok(0, " \t\n"); }
      if (last && atoi(last) == pid) found = (int)hp;
      break;
    }
    fclose(f);
  }
  closedir(d);
  return found;
}
#endif
