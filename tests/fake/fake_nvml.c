/* A fake libnvidia-ml.so.1: the devices of the fake libcuda (same env,
   same UUIDs), memory numbers from the shared in-use record. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fake_cuda.h"

typedef int nvmlReturn_t;
typedef struct { int idx; } dev_t_;
static dev_t_ DEVS[FAKE_MAX_DEV];
static int g_init, g_ndev = 1; static unsigned long long g_mem_of[FAKE_MAX_DEV] = {1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30}, g_reserved;
static struct fake_shared *S;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

static void setup(void) {
  const char *e;
  if ((e = getenv("FAKE_CUDA_DEVICES"))) g_ndev = atoi(e);
  else {
    /* a real driver knows its GPUs without any environment (gpu-quota's
       helper children run with an empty one): fake-nvml-devices beside
       this library, when it exists, holds the count */
    Dl_info di; char p[4096];
    if (dladdr((void *)setup, &di) && di.dli_fname) {
      snprintf(p, sizeof p, "%s", di.dli_fname);
      char *sl = strrchr(p, '/');
      if (sl) {
        snprintf(sl + 1, sizeof p - (sl + 1 - p), "fake-nvml-devices");
        FILE *f = fopen(p, "r");
        if (f) { if (fscanf(f, "%d", &g_ndev) != 1) g_ndev = 1; fclose(f); }
      }
    }
  }
  if (g_ndev < 1) g_ndev = 1;
  if (g_ndev > FAKE_MAX_DEV) g_ndev = FAKE_MAX_DEV;
  if ((e = getenv("FAKE_CUDA_MEM_BYTES"))) fake_mem_sizes(e, g_mem_of);
  if ((e = getenv("FAKE_NVML_RESERVED_BYTES"))) g_reserved = strtoull(e, 0, 0);
  for (int i = 0; i < FAKE_MAX_DEV; i++) DEVS[i].idx = i;
  void *m = MAP_FAILED;
  {
    int fd = fake_registry_open((void *)setup);
    if (fd >= 0) {
      flock(fd, LOCK_EX);
      if (lseek(fd, 0, SEEK_END) < (off_t)sizeof(struct fake_shared)) ftruncate(fd, sizeof(struct fake_shared));
      m = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      flock(fd, LOCK_UN);
      close(fd);
    }
  }
  if (m == MAP_FAILED) m = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  S = m;
  g_init = 1;
}
nvmlReturn_t nvmlInit_v2(void) { setup(); return 0; }
nvmlReturn_t nvmlInit(void) { setup(); return 0; }
nvmlReturn_t nvmlInitWithFlags(unsigned f) { (void)f; setup(); return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { return r ? "fake nvml error" : "Success"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) { if (!g_init) return 1; if (!n) return 2; *n = g_ndev; return 0; }
nvmlReturn_t nvmlDeviceGetCount(unsigned *n) { return nvmlDeviceGetCount_v2(n); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) { if (!g_init) return 1; if (!d || i >= (unsigned)g_ndev) return 2; *d = &DEVS[i]; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, void **d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }
nvmlReturn_t nvmlDeviceGetIndex(void *d, unsigned *i) { if (!d || !i) return 2; *i = ((dev_t_ *)d)->idx; return 0; }
nvmlReturn_t nvmlDeviceGetUUID(void *d, char *buf, unsigned len) {
  if (!g_init) return 1; if (!d || !buf) return 2;
  unsigned char u[16]; int dev = ((dev_t_ *)d)->idx;
  for (int i = 0; i < 16; i++) u[i] = 0x11 * (i % 15 + 1); u[0] = 0xfa; u[1] = 0xce; u[15] = (unsigned char)dev;
  char s[80];
  snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  if (strlen(s) + 1 > len) return 7; /* INSUFFICIENT_SIZE */
  strcpy(buf, s); return 0;
}
static void numbers(int dev, unsigned long long *total, unsigned long long *free_, unsigned long long *used) {
  unsigned long long u = __atomic_load_n(&S->in_use[dev], __ATOMIC_SEQ_CST) + __atomic_load_n(&S->external[dev], __ATOMIC_SEQ_CST);
  unsigned long long mem = g_mem_of[dev];
  *total = mem; *used = u; *free_ = u > mem ? 0 : mem - u;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *d, nvmlMemory_t *m) {
  if (!g_init) return 1; if (!d || !m) return 2;
  numbers(((dev_t_ *)d)->idx, &m->total, &m->free, &m->used); return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *d, nvmlMemory_v2_t *m) {
  if (!g_init) return 1; if (!d || !m) return 2;
  if (m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | (2 << 24))) return 25; /* ARGUMENT_VERSION_MISMATCH */
  unsigned long long t, f, u; numbers(((dev_t_ *)d)->idx, &t, &f, &u);
  m->total = t; m->reserved = g_reserved; m->free = f > g_reserved ? f - g_reserved : 0; m->used = u; return 0;
}

/* ---- additions (context cost, driver limits); additive only ---- */
#include <signal.h>
#include <errno.h>
#include <dirent.h>
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **d) {
  if (!g_init) return 1; if (!uuid || !d) return 2;
  for (int i = 0; i < g_ndev; i++) {
    char s[80];
    if (nvmlDeviceGetUUID(&DEVS[i], s, sizeof s) == 0 && !strcasecmp(s, uuid)) { *d = &DEVS[i]; return 0; }
  }
  return 6; /* NOT_FOUND */
}
nvmlReturn_t nvmlDeviceGetName(void *d, char *buf, unsigned len) {
  if (!g_init) return 1; if (!d || !buf) return 2;
  const char *n = getenv("FAKE_NVML_NAME"); if (!n) n = "Fake GPU";
  if (strlen(n) + 1 > len) return 7; strcpy(buf, n); return 0;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len) {
  if (!buf) return 2;
  const char *v = getenv("FAKE_NVML_DRIVER_VERSION"); if (!v) v = "580.1.fake";
  if (strlen(v) + 1 > len) return 7; strcpy(buf, v); return 0;
}
nvmlReturn_t nvmlDeviceGetMigMode(void *d, unsigned *cur, unsigned *pend) { (void)d; (void)cur; (void)pend; return 3; /* NOT_SUPPORTED: no MIG */ }

/* Device memory used (nvmlDeviceGetMemoryInfo) is the registry's in_use:
   resident managed memory included (fake_managed.c); the per-process figure
   below is ordinary memory only. */
/* A process's CUDA context costs memory that only NVML's per-process view
   shows (as on a real driver): FAKE_NVML_CTX_BYTES, default 300 MiB, for
   every process that holds memory on the device. With a shared registry
   (fake_cuda.h: FAKE_CUDA_PEAK_FILE, or fake-gpu-registry beside this
   library) every live process of it is listed, under the pid the caller's
   pid namespace gives it (a container's process is listed by its host pid
   to a caller on the host, as the real driver does); without one (a
   cleared environment, e.g. gpu-quota-hook measure-context) the calling
   process is, from the fake libcuda loaded in it (fake_cuda_stats).

   What a driver cannot tell, for the callers' fallbacks: FAKE_NVML_PROCESSES,
   else the first word of fake-nvml-processes beside this library, is
   "not-supported" (the call returns NVML_ERROR_NOT_SUPPORTED) or
   "unattributed" (each process is listed with usedGpuMemory
   NVML_VALUE_NOT_AVAILABLE, as under WDDM or some virtualised GPUs). */
static int processes_mode(void) { /* 0 normal, 1 not supported, 2 unattributed */
  char w[32] = "", p[4096];
  const char *e = getenv("FAKE_NVML_PROCESSES");
  if (e) snprintf(w, sizeof w, "%s", e);
  else if (fake_beside((void *)processes_mode, "fake-nvml-processes", p, sizeof p)) {
    FILE *f = fopen(p, "r");
    if (f) { if (fscanf(f, "%31s", w) != 1) w[0] = 0; fclose(f); }
  }
  return !strcmp(w, "not-supported") ? 1 : !strcmp(w, "unattributed") ? 2 : 0;
}
static int caller_pid_of(int pid, unsigned ns) { return fake_caller_pid_of(pid, ns); }
/* a process that exited (or is a zombie) holds no device memory */
static int gone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[512]; snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC); if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1); close(fd); if (n <= 0) return 0; buf[n] = 0;
  char *p = strrchr(buf, ')'); return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}
static unsigned long long ctx_bytes(void) {
  const char *e = getenv("FAKE_NVML_CTX_BYTES");
  return e ? strtoull(e, 0, 0) : 300ull << 20;
}
static nvmlReturn_t running(void *d, unsigned *count, nvmlProcessInfo_t *infos) {
  if (!g_init) return 1; if (!d || !count) return 2;
  int mode = processes_mode();
  if (mode == 1) return 3; /* NOT_SUPPORTED */
  int dev = ((dev_t_ *)d)->idx;
  nvmlProcessInfo_t tmp[FAKE_MAX_PROCS]; unsigned n = 0;
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int pid = __atomic_load_n(&S->procs[i].pid, __ATOMIC_SEQ_CST);
    unsigned ns = __atomic_load_n(&S->procs[i].pidns, __ATOMIC_SEQ_CST);
    unsigned long long u = __atomic_load_n(&S->procs[i].used[dev], __ATOMIC_SEQ_CST);
    /* used[] leaves managed memory out, as the H200's NVML does (it lists a
       process holding 100 GiB of managed memory at its context's size): a
       process with only resident managed memory is listed at its context */
    unsigned long long m = __atomic_load_n(&S->mprocs[i].resident[dev], __ATOMIC_SEQ_CST);
    if (pid <= 0 || (u == 0 && m == 0)) continue;
    if (!(pid = caller_pid_of(pid, ns)) || gone(pid)) continue;
    tmp[n].pid = pid; tmp[n].usedGpuMemory = mode == 2 ? ~0ull : u + ctx_bytes(); tmp[n].gpuInstanceId = tmp[n].computeInstanceId = ~0u; n++;
  }
  if (n == 0) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void (*stats)(void *) = h ? (void (*)(void *))dlsym(h, "fake_cuda_stats") : 0;
    if (stats) {
      static unsigned long long buf[4096]; /* larger than struct fake_stats; in_use[] comes first */
      memset(buf, 0, sizeof buf); stats(buf);
      if (buf[dev]) { tmp[0].pid = getpid(); tmp[0].usedGpuMemory = mode == 2 ? ~0ull : buf[dev] + ctx_bytes(); tmp[0].gpuInstanceId = tmp[0].computeInstanceId = ~0u; n = 1; }
    }
  }
  if (!infos || *count < n) { *count = n; return n ? 7 : 0; }
  memcpy(infos, tmp, n * sizeof *infos); *count = n; return 0;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *c, nvmlProcessInfo_t *i) { return running(d, c, i); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *d, unsigned *c, nvmlProcessInfo_t *i) { return running(d, c, i); }

#ifndef FAKE_NO_MEMLIMITS
/* r615+: nvmlDeviceSetMemoryLimits_v1 (nvml.h of CUDA 13.4). The fake
   appends one line per call to FAKE_NVML_LIMITS_LOG, else to
   fake-nvml-limits.log beside this library when that file exists, with
   whether the cgroup directory existed at the time of the call. */
typedef struct { const char *nameSpace; unsigned long long softLimit, hardLimit; } nvmlSetMemoryLimits_v1_t;
nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(void *d, nvmlSetMemoryLimits_v1_t *l) {
  if (!g_init) return 1; if (!d || !l || !l->nameSpace) return 2;
  if (geteuid() != 0) return 4; /* NO_PERMISSION */
  int exists = access(l->nameSpace, F_OK) == 0;
  if (!exists) return 6; /* NOT_FOUND, like a cgroup that is gone */
  char log[4096]; const char *e = getenv("FAKE_NVML_LIMITS_LOG");
  if (e) snprintf(log, sizeof log, "%s", e);
  else {
    Dl_info di; if (!dladdr((void *)nvmlDeviceSetMemoryLimits_v1, &di) || !di.dli_fname) return 0;
    snprintf(log, sizeof log, "%s", di.dli_fname);
    char *sl = strrchr(log, '/'); if (!sl) return 0;
    snprintf(sl + 1, sizeof log - (sl + 1 - log), "fake-nvml-limits.log");
    if (access(log, F_OK) != 0) return 0;
  }
  char uuid[80]; nvmlDeviceGetUUID(d, uuid, sizeof uuid);
  FILE *f = fopen(log, "a");
  if (f) { fprintf(f, "set uuid=%s ns=%s soft=%llu hard=%llu pid=%d\n", uuid, l->nameSpace, l->softLimit, l->hardLimit, getpid()); fclose(f); }
  return 0;
}
#endif
