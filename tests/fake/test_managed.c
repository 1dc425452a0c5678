/* The fake driver's managed memory (fake_managed.c) across processes:
   `make -C tests/fake test-managed`. Workers are forked processes, each with
   its own fake libcuda (dlopen after the fork), driven over pipes; this
   process reads the registry (fake_cuda.h) and the fake NVML, and runs
   fake-registry-dump. Ends with "N passed, M failed". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fake_cuda.h"

typedef unsigned long long u64;
#define MiB (1ull << 20)
static int passed, failed;
static void check(int ok, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt);
  printf(ok ? "ok " : "FAIL ");
  vprintf(fmt, ap); printf("\n"); fflush(stdout);
  va_end(ap);
  if (ok) passed++; else failed++;
}
static char dir[4096];

/* ------------------------------------------------------------ a worker */
struct loc { int type, id; };
static void worker(int in, int out) {
  char p[4200]; snprintf(p, sizeof p, "%s/libcuda.so.1", dir);
  void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!h) { dprintf(out, "-1 0\n"); _exit(1); }
#define F(name, ...) int (*name)(__VA_ARGS__) = (int (*)(__VA_ARGS__))dlsym(h, #name)
  F(cuInit, unsigned); F(cuDevicePrimaryCtxRetain, void **, int); F(cuCtxSetCurrent, void *);
  F(cuMemAllocManaged, u64 *, size_t, unsigned); F(cuMemAlloc_v2, u64 *, size_t); F(cuMemFree_v2, u64);
  F(cuMemPrefetchAsync, u64, size_t, int, void *); F(cuMemAdvise, u64, size_t, int, int);
  F(cuPointerGetAttribute, void *, int, u64); F(cuMemGetInfo_v2, size_t *, size_t *);
  F(cuGetProcAddress_v2, const char *, void **, int, u64, int *);
  void *ctx;
  int rc = cuInit(0);
  if (!rc) rc = cuDevicePrimaryCtxRetain(&ctx, 0);
  if (!rc) rc = cuCtxSetCurrent(ctx);
  dprintf(out, "%d %d\n", rc, (int)getpid());
  u64 ptr[64], size[64]; int n = 0;
  FILE *f = fdopen(in, "r");
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char c = line[0]; u64 a = 0, b = 0; long long s = 0;
    sscanf(line + 1, "%llu %lld", &a, &s); b = (u64)s;
    u64 v = 0; rc = 0;
    switch (c) {
    case 'M': rc = cuMemAllocManaged(&ptr[n], a, 1); if (!rc) { size[n] = a; v = n++; } break;
    case 'A': rc = cuMemAlloc_v2(&ptr[n], a); if (!rc) { size[n] = a; v = n++; } break;
    case 'F': rc = cuMemFree_v2(ptr[a]); break;
    case 'P': rc = cuMemPrefetchAsync(ptr[a], size[a], (int)s, 0); break;
    case 'p': { /* the same through cuGetProcAddress at CUDA 12.2+: the _v2 signature */
      int (*pf)(u64, size_t, struct loc, unsigned, void *) = 0;
      rc = cuGetProcAddress_v2("cuMemPrefetchAsync", (void **)&pf, 12020, 0, 0);
      if (!rc) rc = pf(ptr[a], size[a], s < 0 ? (struct loc){2, 0} : (struct loc){1, (int)s}, 0, 0);
      break; }
    case 'V': rc = cuMemAdvise(ptr[a], size[a], 3, (int)s); break; /* SET_PREFERRED_LOCATION */
    case 'Q': { int iv = -7; rc = cuPointerGetAttribute(&iv, (int)s, ptr[a] + 1); v = (u64)(long long)iv; break; }
    case 'I': { size_t fr = 0, t = 0; rc = cuMemGetInfo_v2(&fr, &t); v = fr; break; }
    case 'S': /* a stress round: a managed allocations placed, each kept or freed, ordinary ones between */
      for (u64 i = 0; i < a; i++) {
        u64 mp, op;
        if (cuMemAllocManaged(&mp, 64 * (1ull << 20), 1)) { v++; continue; }
        if (cuMemPrefetchAsync(mp, 64 * (1ull << 20), 0, 0)) v++;
        if (!cuMemAlloc_v2(&op, 200 * (1ull << 20))) cuMemFree_v2(op); else v++;
        if (cuMemPrefetchAsync(mp, 64 * (1ull << 20), 0, 0)) v++;
        if (i % 2) cuMemFree_v2(mp);
      }
      break;
    case 'K': { /* fork after init: parent and child race (the child opens its own lock description) */
      pid_t k = fork();
      if (k == 0) {
        for (u64 i = 0; i < a; i++) { u64 mp; if (!cuMemAllocManaged(&mp, 64 * (1ull << 20), 1) && !cuMemPrefetchAsync(mp, 64 * (1ull << 20), 0, 0)) { u64 op; if (!cuMemAlloc_v2(&op, 300 * (1ull << 20))) cuMemFree_v2(op); } }
        _exit(0);
      }
      for (u64 i = 0; i < a; i++) { u64 mp; if (!cuMemAllocManaged(&mp, 64 * (1ull << 20), 1) && !cuMemPrefetchAsync(mp, 64 * (1ull << 20), 0, 0)) { u64 op; if (!cuMemAlloc_v2(&op, 300 * (1ull << 20))) cuMemFree_v2(op); } }
      waitpid(k, 0, 0);
      break; }
    case 'X': _exit(0);
    }
    (void)b;
    dprintf(out, "%d %llu\n", rc, v);
  }
  _exit(0);
}
struct w { pid_t pid; int to, from; FILE *rf; };
static struct w spawn(const char *env) {
  int a[2], b[2];
  if (pipe(a) || pipe(b)) { perror("pipe"); exit(1); }
  pid_t pid = fork();
  if (pid == 0) {
    close(a[1]); close(b[0]);
    if (env) { char e[256]; snprintf(e, sizeof e, "%s", env); char *eq = strchr(e, '='); *eq = 0; setenv(e, eq + 1, 1); }
    worker(a[0], b[1]);
  }
  close(a[0]); close(b[1]);
  struct w w = {pid, a[1], b[0], fdopen(b[0], "r")};
  int rc = -1, wp = 0;
  if (fscanf(w.rf, "%d %d", &rc, &wp) != 2 || rc != 0) { fprintf(stderr, "worker start failed: %d\n", rc); exit(1); }
  return w;
}
/* one command; returns the CUresult, *v the value */
static int cmd(struct w *w, u64 *v, const char *fmt, ...) {
  char buf[256]; va_list ap; va_start(ap, fmt); int n = vsnprintf(buf, sizeof buf - 1, fmt, ap); va_end(ap);
  buf[n++] = '\n';
  if (write(w->to, buf, (size_t)n) != n) return -1;
  int rc = -1; u64 val = 0;
  if (fscanf(w->rf, "%d %llu", &rc, &val) != 2) return -1;
  if (v) *v = val;
  return rc;
}
static void gone(struct w *w, int sig) {
  if (sig) kill(w->pid, sig); else cmd(w, 0, "X");
  waitpid(w->pid, 0, 0);
  fclose(w->rf); close(w->to);
}

/* ------------------------------------------------------------ the registry and NVML */
static struct fake_shared *S;
static int slot_of(pid_t pid) { for (int i = 0; i < FAKE_MAX_PROCS; i++) if (S->procs[i].pid == pid) return i; return -1; }
static u64 res(pid_t pid) { int i = slot_of(pid); return i < 0 ? 0 : S->mprocs[i].resident[0]; }
static u64 host(pid_t pid) { int i = slot_of(pid); return i < 0 ? 0 : S->mprocs[i].host; }
static u64 ordinary(pid_t pid) { int i = slot_of(pid); return i < 0 ? 0 : S->procs[i].used[0]; }
static const struct fake_evict *ev(u64 k) { return &S->evict[k % FAKE_EVICT_RING]; }

typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } nvproc;
typedef struct { unsigned long long total, free, used; } nvmem;
static int (*nvml_procs)(void *, unsigned *, nvproc *);
static int (*nvml_mem)(void *, nvmem *);
static void *nvdev;
/* NVML's per-process figure for pid on GPU 0; -1 when not listed */
static long long nvml_used(pid_t pid) {
  nvproc l[64]; unsigned n = 64;
  if (nvml_procs(nvdev, &n, l)) return -2;
  for (unsigned i = 0; i < n; i++) if (l[i].pid == (unsigned)pid) return (long long)l[i].used;
  return -1;
}

static double now_ms(void) { struct timeval t; gettimeofday(&t, 0); return t.tv_sec * 1e3 + t.tv_usec / 1e3; }

int main(int argc, char **argv) {
  (void)argc;
  snprintf(dir, sizeof dir, "%s", argv[0]);
  char *sl = strrchr(dir, '/'); if (sl) *sl = 0; else strcpy(dir, ".");
  if (dir[0] != '/') { char cwd[2048]; if (!getcwd(cwd, sizeof cwd)) return 1; char t[4096]; snprintf(t, sizeof t, "%s/%s", cwd, dir); snprintf(dir, sizeof dir, "%s", t); }
  signal(SIGPIPE, SIG_IGN); /* a worker that died fails its checks, not this program */
  char reg[] = "/tmp/fake-managed-test.XXXXXX";
  int fd = mkstemp(reg);
  if (fd < 0) { perror("mkstemp"); return 1; }
  if (ftruncate(fd, sizeof(struct fake_shared))) return 1;
  S = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  setenv("FAKE_CUDA_PEAK_FILE", reg, 1);
  setenv("FAKE_CUDA_DEVICES", "1", 1);
  setenv("FAKE_CUDA_MEM_BYTES", "1073741824", 1); /* 1 GiB */
  setenv("FAKE_NVML_CTX_BYTES", "1048576", 1);
  unsetenv("FAKE_CUDA_HOST_BYTES"); unsetenv("FAKE_CUDA_EVICT_MS_PER_GIB"); unsetenv("FAKE_CUDA_MANAGED_RESIDENT");
  unsetenv("FAKE_CUDA_CTX_BYTES");
  char p[4200]; snprintf(p, sizeof p, "%s/libnvidia-ml.so.1", dir);
  void *nh = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!nh) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  int (*ninit)(void) = (int (*)(void))dlsym(nh, "nvmlInit_v2");
  int (*nbyidx)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(nh, "nvmlDeviceGetHandleByIndex_v2");
  nvml_procs = (int (*)(void *, unsigned *, nvproc *))dlsym(nh, "nvmlDeviceGetComputeRunningProcesses_v3");
  nvml_mem = (int (*)(void *, nvmem *))dlsym(nh, "nvmlDeviceGetMemoryInfo");
  if (ninit() || nbyidx(0, &nvdev)) { fprintf(stderr, "nvml init\n"); return 1; }
  u64 v = 0; int rc;

  /* an ordinary allocation with no managed memory around: refused as ever */
  struct w a = spawn(0);
  u64 refused0 = S->refused;
  rc = cmd(&a, 0, "A %llu", 2 * 1024 * MiB);
  check(rc == 2 && S->refused == refused0 + 1 && S->in_use[0] == 0, "no managed memory: 2 GiB refused as before (rc %d, in_use %llu)", rc, (unsigned long long)S->in_use[0]);

  /* B places 400 MiB, then C 300 MiB: resident, not in NVML's per-process figure */
  struct w b = spawn(0), c = spawn(0);
  rc = cmd(&b, 0, "M %llu", 400 * MiB); check(rc == 0 && S->in_use[0] == 0, "B's cuMemAllocManaged places nothing (in_use %llu)", (unsigned long long)S->in_use[0]);
  rc = cmd(&b, 0, "V 0 0"); check(rc == 0, "B's cuMemAdvise(SET_PREFERRED_LOCATION, GPU 0)");
  rc = cmd(&b, 0, "P 0 0"); check(rc == 0 && res(b.pid) == 400 * MiB, "B's prefetch to GPU 0: 400 MiB resident (%llu)", res(b.pid));
  rc = cmd(&c, 0, "M %llu", 300 * MiB); if (!rc) rc = cmd(&c, 0, "p 0 0");
  check(rc == 0 && res(c.pid) == 300 * MiB, "C's 300 MiB placed through cuGetProcAddress's cuMemPrefetchAsync_v2 (%llu)", res(c.pid));
  check(S->in_use[0] == 700 * MiB && S->managed_resident[0] == 700 * MiB, "in_use counts resident managed memory (%llu)", (unsigned long long)S->in_use[0]);
  rc = cmd(&a, &v, "I"); check(rc == 0 && v == 324 * MiB, "A's cuMemGetInfo: 324 MiB free (%llu)", v);
  check(ordinary(b.pid) == 0 && nvml_used(b.pid) == (long long)MiB, "NVML lists B at its context only, managed memory left out (%lld)", nvml_used(b.pid));
  nvmem m = {0}; nvml_mem(nvdev, &m);
  check(m.used == 700 * MiB, "NVML's device figure includes resident managed memory (%llu)", m.used);
  rc = cmd(&b, &v, "Q 0 8"); check(rc == 0 && v == 1, "B: CU_POINTER_ATTRIBUTE_IS_MANAGED 1 (%llu)", v);
  rc = cmd(&b, &v, "Q 0 2"); check(rc == 0 && v == 2, "B: CU_POINTER_ATTRIBUTE_MEMORY_TYPE device (%llu)", v);

  /* A's 500 MiB evicts 176 MiB of B's, the earliest placed; C untouched */
  u64 e0 = S->evictions;
  rc = cmd(&a, 0, "A %llu", 500 * MiB); check(rc == 0, "A's ordinary 500 MiB past the free 324 MiB succeeds");
  check(S->evictions == e0 + 1 && ev(e0)->victim_pid == b.pid && ev(e0)->bytes == 176 * MiB && ev(e0)->evictor_pid == a.pid,
        "one eviction: victim B, 176 MiB, by A (victim %d bytes %llu)", ev(e0)->victim_pid, (unsigned long long)ev(e0)->bytes);
  check(res(b.pid) == 224 * MiB && host(b.pid) == 176 * MiB && res(c.pid) == 300 * MiB, "B 224 MiB resident + 176 on the host, C 300 resident (%llu %llu %llu)", res(b.pid), host(b.pid), res(c.pid));
  check(ordinary(a.pid) == 500 * MiB && S->in_use[0] == 1024 * MiB && S->managed_host == 176 * MiB, "A 500 MiB ordinary, GPU full, host 176 MiB");
  rc = cmd(&a, &v, "Q 0 8"); check(rc == 0 && v == 0, "A: IS_MANAGED 0 for ordinary memory (%llu)", v);

  /* 300 more: the rest of B's (224), then 76 of C's */
  rc = cmd(&a, 0, "A %llu", 300 * MiB); check(rc == 0, "A's 300 MiB more succeeds");
  check(S->evictions == e0 + 3 && ev(e0 + 1)->victim_pid == b.pid && ev(e0 + 1)->bytes == 224 * MiB &&
        ev(e0 + 2)->victim_pid == c.pid && ev(e0 + 2)->bytes == 76 * MiB,
        "B's remaining 224 MiB evicted before C's 76 (%d:%llu %d:%llu)", ev(e0 + 1)->victim_pid, (unsigned long long)ev(e0 + 1)->bytes,
        ev(e0 + 2)->victim_pid, (unsigned long long)ev(e0 + 2)->bytes);
  check(res(b.pid) == 0 && host(b.pid) == 400 * MiB && res(c.pid) == 224 * MiB && host(c.pid) == 76 * MiB, "B all on the host, C 224 resident + 76 host");
  check(nvml_used(a.pid) == (long long)(801 * MiB), "NVML: A at its ordinary 800 MiB + context (%lld)", nvml_used(a.pid));

  /* what evicting everything could not make fit is refused, moving nothing */
  e0 = S->evictions;
  rc = cmd(&a, 0, "A %llu", 300 * MiB); check(rc == 2 && S->evictions == e0 && res(c.pid) == 224 * MiB, "A's 300 MiB beyond all evictable memory: refused, nothing moved");

  /* B's prefetch brings its pages back, evicting C's */
  rc = cmd(&a, 0, "F 1"); check(rc == 0, "A frees its second allocation (300 MiB)");
  rc = cmd(&b, 0, "P 0 0"); check(rc == 0 && res(b.pid) == 400 * MiB && host(b.pid) == 0, "B's prefetch brings its 400 MiB back (%llu resident, %llu host)", res(b.pid), host(b.pid));
  check(S->evictions == e0 + 1 && ev(e0)->victim_pid == c.pid && ev(e0)->bytes == 100 * MiB && ev(e0)->evictor_pid == b.pid,
        "...evicting 100 MiB of C's (%d:%llu)", ev(e0)->victim_pid, (unsigned long long)ev(e0)->bytes);
  check(res(c.pid) == 124 * MiB && host(c.pid) == 176 * MiB && S->managed_host == 176 * MiB, "C 124 resident + 176 host");

  /* a prefetch to the host (CU_DEVICE_CPU), then cuMemFree releases both */
  rc = cmd(&c, 0, "P 0 -1"); check(rc == 0 && res(c.pid) == 0 && host(c.pid) == 300 * MiB, "C's prefetch to the host: 300 MiB there");
  rc = cmd(&c, 0, "F 0"); check(rc == 0 && host(c.pid) == 0 && S->managed_host == 0 && S->in_use[0] == 900 * MiB, "C's cuMemFree releases its host bytes (in_use %llu)", (unsigned long long)S->in_use[0]);
  gone(&c, 0);

  /* FAKE_CUDA_HOST_BYTES: eviction stops at the host's size, the allocation fails */
  struct w d = spawn("FAKE_CUDA_HOST_BYTES=52428800"); /* 50 MiB */
  e0 = S->evictions;
  rc = cmd(&d, 0, "A %llu", 200 * MiB);
  check(rc == 2, "D (host 50 MiB) allocating 200 MiB on a full GPU: out of memory (%d)", rc);
  check(S->evictions == e0 + 1 && ev(e0)->bytes == 50 * MiB && res(b.pid) == 350 * MiB && S->managed_host == 50 * MiB,
        "...after moving the 50 MiB the host takes (B %llu resident, host %llu)", res(b.pid), (unsigned long long)S->managed_host);
  gone(&d, 0);

  /* FAKE_CUDA_EVICT_MS_PER_GIB: the evicting call waits */
  struct w s = spawn("FAKE_CUDA_EVICT_MS_PER_GIB=1000");
  double t0 = now_ms();
  rc = cmd(&s, 0, "A %llu", 250 * MiB); /* 174 MiB free: evicts 76 MiB of B's, ~74 ms */
  double dt = now_ms() - t0;
  check(rc == 0 && dt >= 70 && res(b.pid) == 274 * MiB, "1000 ms/GiB: evicting 76 MiB took %.0f ms", dt);
  gone(&s, 0);

  /* fake-registry-dump */
  char cmdline[8400];
  snprintf(cmdline, sizeof cmdline, "%s/fake-registry-dump %s", dir, reg);
  FILE *f = popen(cmdline, "r");
  char out[65536] = ""; size_t got = f ? fread(out, 1, sizeof out - 1, f) : 0; out[got] = 0;
  int st = f ? pclose(f) : -1;
  char want[256];
  snprintf(want, sizeof want, "evict n=1 victim_pid=%d", b.pid);
  int has1 = strstr(out, want) != 0;
  snprintf(want, sizeof want, "proc pid=%d ", b.pid);
  char *bl = strstr(out, want), bwant[128], head[64];
  snprintf(bwant, sizeof bwant, "managed_resident=%llu managed_host=%llu\n", res(b.pid), host(b.pid));
  snprintf(head, sizeof head, "evictions %llu ", (unsigned long long)S->evictions);
  check(st == 0 && S->evictions == 6 && !strncmp(out, head, strlen(head)) && has1 && bl && strstr(bl, "managed_resident=") &&
        !strncmp(strstr(bl, "managed_resident="), bwant, strlen(bwant)),
        "fake-registry-dump: evictions, records, B's line");
  if (failed) printf("%s", out);

  /* B killed: its resident and host bytes are free at the next charge */
  gone(&b, SIGKILL);
  snprintf(cmdline, sizeof cmdline, "%s/fake-registry-dump --reap %s", dir, reg);
  f = popen(cmdline, "r");
  got = f ? fread(out, 1, sizeof out - 1, f) : 0; out[got] = 0;
  st = f ? pclose(f) : -1;
  check(st == 0 && strstr(out, "host managed=0\n") && S->managed_resident[0] == 0 && S->managed_host == 0 && slot_of(b.pid) < 0,
        "B killed: fake-registry-dump --reap frees its resident and host bytes (resident %llu host %llu)",
        (unsigned long long)S->managed_resident[0], (unsigned long long)S->managed_host);
  struct w e = spawn(0);
  rc = cmd(&e, 0, "A %llu", MiB); check(rc == 0, "a charge after B's death (reaps the dead process with 250 MiB)");
  check(S->managed_resident[0] == 0 && S->managed_host == 0 && S->in_use[0] == 501 * MiB && slot_of(b.pid) < 0,
        "B's managed memory, resident and on the host, freed with its slot (resident %llu host %llu in_use %llu)",
        (unsigned long long)S->managed_resident[0], (unsigned long long)S->managed_host, (unsigned long long)S->in_use[0]);
  gone(&e, 0);
  gone(&a, 0);

  /* four processes at once: placing, evicting each other, freeing */
  struct w ws[4];
  for (int i = 0; i < 4; i++) ws[i] = spawn(0);
  for (int i = 0; i < 4; i++) dprintf(ws[i].to, i ? "S 60\n" : "K 60\n");
  int ok = 1;
  for (int i = 0; i < 4; i++) { int r2; u64 misses; ok &= fscanf(ws[i].rf, "%d %llu", &r2, &misses) == 2 && r2 == 0; }
  u64 used = 0, mres = 0, mhost = 0, eres = 0, ehost = 0;
  for (int i = 0; i < FAKE_MAX_PROCS; i++) if (S->procs[i].pid > 0) { used += S->procs[i].used[0]; mres += S->mprocs[i].resident[0]; mhost += S->mprocs[i].host; }
  for (int i = 0; i < FAKE_MAX_MANAGED; i++) if (S->managed[i].live) { eres += S->managed[i].resident; ehost += S->managed[i].host; }
  check(ok && S->in_use[0] == used + S->managed_resident[0] && S->managed_resident[0] == mres && mres == eres &&
        S->managed_host == mhost && mhost == ehost && S->peak[0] <= 1024 * MiB && S->evictions > 6,
        "5 processes racing (one forked after its init): in_use %llu = ordinary %llu + resident %llu (per process %llu, per allocation %llu); host %llu = %llu = %llu; peak %llu; %llu evictions",
        (unsigned long long)S->in_use[0], used, (unsigned long long)S->managed_resident[0], mres, eres,
        (unsigned long long)S->managed_host, mhost, ehost, (unsigned long long)S->peak[0], (unsigned long long)S->evictions);
  for (int i = 0; i < 4; i++) gone(&ws[i], SIGKILL);
  e = spawn(0);
  rc = cmd(&e, 0, "A %llu", MiB);
  check(rc == 0 && S->managed_resident[0] == 0 && S->managed_host == 0 && S->in_use[0] == MiB,
        "all killed: everything free but the new process's 1 MiB (in_use %llu, resident %llu, host %llu)",
        (unsigned long long)S->in_use[0], (unsigned long long)S->managed_resident[0], (unsigned long long)S->managed_host);
  gone(&e, 0);

  /* FAKE_CUDA_MANAGED_RESIDENT=1: placed at cuMemAllocManaged */
  struct w r = spawn("FAKE_CUDA_MANAGED_RESIDENT=1");
  rc = cmd(&r, 0, "M %llu", 10 * MiB);
  check(rc == 0 && res(r.pid) == 10 * MiB && ordinary(r.pid) == 0, "FAKE_CUDA_MANAGED_RESIDENT=1: 10 MiB resident at allocation (%llu)", res(r.pid));
  rc = cmd(&r, 0, "F 0");
  check(rc == 0 && res(r.pid) == 0 && S->managed_resident[0] == 0, "...and freed (%llu)", res(r.pid));
  gone(&r, 0);
  unlink(reg);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
