/* A fake libnvidia-ml.so.1: the devices of the fake libcuda (same env,
   same UUIDs), memory numbers from the shared in-use record. */
#define _GNU_SOURCE
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
static int g_init, g_ndev = 1; static unsigned long long g_mem = 1ull << 30, g_reserved;
static struct fake_shared *S;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

static void setup(void) {
  const char *e;
  if ((e = getenv("FAKE_CUDA_DEVICES"))) g_ndev = atoi(e);
  if (g_ndev < 1) g_ndev = 1;
  if (g_ndev > FAKE_MAX_DEV) g_ndev = FAKE_MAX_DEV;
  if ((e = getenv("FAKE_CUDA_MEM_BYTES"))) g_mem = strtoull(e, 0, 0);
  if ((e = getenv("FAKE_NVML_RESERVED_BYTES"))) g_reserved = strtoull(e, 0, 0);
  for (int i = 0; i < FAKE_MAX_DEV; i++) DEVS[i].idx = i;
  const char *pf = getenv("FAKE_CUDA_PEAK_FILE");
  void *m = MAP_FAILED;
  if (pf && *pf) {
    int fd = open(pf, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
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
  *total = g_mem; *used = u; *free_ = u > g_mem ? 0 : g_mem - u;
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
