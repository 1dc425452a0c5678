/* A fake libcuda.so.1 for the interceptor tests: N devices of a fixed size
   (FAKE_CUDA_DEVICES, FAKE_CUDA_MEM_BYTES; "A,B,..." gives device i the
   i-th size, the last one repeating: GPUs of different sizes), real
   bookkeeping of allocations,
   cuGetProcAddress/_v2 over its own symbols (version + ptsz aware), and a
   cross-process in-use/peak record in the registry (FAKE_CUDA_PEAK_FILE, or
   fake-gpu-registry beside the library; fake_cuda.h).
   FAKE_CUDA_GPA_MODE=internal makes cuGetProcAddress return internal
   function pointers that differ from the exported symbols (like a driver
   that hands out non-exported entry points). Built with
   -Bsymbolic-functions so that its own symbol addresses are its own. */
#include "fake_cuda_internal.h"
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>



int g_ndev = 1;
u64 g_mem_of[FAKE_MAX_DEV] = {1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 30};
int g_internal_gpa = 0;
struct fake_shared *S;
struct fake_stats ST;
pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
int g_inited;
int my_proc = -1, my_proc_pid = 0;

/* this process's pid namespace (fake_pidns), set at init */
static uint32_t g_pidns;
/* whether slot i's pid is one of this process's namespace (a slot of another
   namespace is judged there: its pid means another process here) */
int same_ns(int i) {
  uint32_t ns = __atomic_load_n(&S->procs[i].pidns, __ATOMIC_SEQ_CST);
  return ns == 0 || g_pidns == 0 || ns == g_pidns;
}

/* ------------------------------------------------------------ init */
__attribute__((constructor)) static void fake_ctor(void) {
  const char *e = getenv("FAKE_CUDA_GPA_MODE");
  if (e && !strcmp(e, "internal")) g_internal_gpa = 1;
}
void fake_init(void) {
  if (g_inited) return;
  const char *e;
  if ((e = getenv("FAKE_CUDA_DEVICES"))) g_ndev = atoi(e);
  if (g_ndev < 1) g_ndev = 1;
  if (g_ndev > FAKE_MAX_DEV) g_ndev = FAKE_MAX_DEV;
  if ((e = getenv("FAKE_CUDA_MEM_BYTES"))) fake_mem_sizes(e, g_mem_of);
  if ((e = getenv("FAKE_CUDA_GPA_MODE")) && !strcmp(e, "internal")) g_internal_gpa = 1;
  void *m = MAP_FAILED;
  {
    int fd = fake_registry_open((void *)fake_init);
    if (fd >= 0) {
      flock(fd, LOCK_EX);
      off_t sz = lseek(fd, 0, SEEK_END);
      if (sz < (off_t)sizeof(struct fake_shared)) ftruncate(fd, sizeof(struct fake_shared));
      m = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED && ((struct fake_shared *)m)->magic != FAKE_SHARED_MAGIC)
        ((struct fake_shared *)m)->magic = FAKE_SHARED_MAGIC;
      flock(fd, LOCK_UN);
      if (m != MAP_FAILED) managed_keep_fd(fd); /* the managed lock (fake_managed.c) */
      else close(fd);
    }
  }
  if (m == MAP_FAILED)
    m = mmap(0, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  S = m;
  g_inited = 1;
  g_pidns = fake_pidns();
  /* an earlier image of this process (it exec'd) closed its device files:
     its memory is gone */
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int pid = getpid();
    if (!same_ns(i)) continue;
    if (!__atomic_compare_exchange_n(&S->procs[i].pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
    reap_slot(i);
  }
}

/* a process that exited holds no device memory, even before it is reaped
   (the driver frees it when the process closes its device files) */
int proc_gone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[512]; snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC); if (fd < 0) return 0; /* cannot tell: alive */
  ssize_t n = read(fd, buf, sizeof buf - 1); close(fd); if (n <= 0) return 0; buf[n] = 0;
  char *p = strrchr(buf, ')'); return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}
/* free what slot i's process held (its pid set to -1 by the caller, which
   won it), then the slot: ordinary bytes, and its managed allocations,
   resident and on the host (fake_managed.c) */
void reap_slot(int i) {
  for (int d = 0; d < FAKE_MAX_DEV; d++) {
    u64 u = __atomic_exchange_n(&S->procs[i].used[d], 0, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&S->in_use[d], u, __ATOMIC_SEQ_CST);
  }
  managed_release_slot(i);
  __atomic_store_n(&S->procs[i].pid, 0, __ATOMIC_SEQ_CST);
}
/* reclaim the shared records of dead processes (their memory is gone) */
void reap_dead(void) {
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int pid = __atomic_load_n(&S->procs[i].pid, __ATOMIC_SEQ_CST);
    if (pid <= 0 || pid == getpid() || !same_ns(i)) continue;
    if (!proc_gone(pid)) continue;
    if (!__atomic_compare_exchange_n(&S->procs[i].pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
    reap_slot(i);
  }
}

int proc_slot(void) {
  if (my_proc >= 0 && my_proc_pid == getpid()) return my_proc;
  int me = getpid();
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    int z = 0;
    /* claimed (-2) before its namespace is written, published after: a
       reader never takes the pid in the wrong namespace */
    if (__atomic_compare_exchange_n(&S->procs[i].pid, &z, -2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      __atomic_store_n(&S->procs[i].pidns, g_pidns, __ATOMIC_SEQ_CST);
      __atomic_store_n(&S->procs[i].pid, me, __ATOMIC_SEQ_CST);
      my_proc = i; my_proc_pid = me;
      return i;
    }
  }
  return -1;
}

/* ------------------------------------------------------------ bookkeeping */
/* The lifetimes follow the real driver's (docs/interceptor.md, "fake driver"):
   - contexts own their allocations (cuMemAlloc*, pitch, managed, arrays);
     cuCtxDestroy, cuDevicePrimaryCtxReset and the last primary release free
     them; each context costs FAKE_CUDA_CTX_BYTES of device memory;
   - a VMM physical allocation lives while its handle has references
     (create, retain, import) or any mapping of it exists;
   - stream-ordered pools (a default one per device, cuMemPoolCreate ones)
     reserve memory in FAKE_CUDA_POOL_GRAN steps and keep freed memory up to
     their release threshold until a synchronisation or cuMemPoolTrimTo;
   - streams belong to a context (and so to a device);
   - device memory in use (in_use[], peak[]) counts all of that, per device,
     across the processes sharing FAKE_CUDA_PEAK_FILE. */
struct rec *recs; size_t nrec, caprec;
u64 next_ptr = 0x7f0000000000ull, next_ptr32 = 0x10000000ull, next_handle = 0x50000000ull;
u64 g_ctx_bytes, g_pool_gran = 2u << 20, g_pitch_align = 2048;
int g_fail_next_free;

struct ctx ctxs[MAXCTX];
int primary_of[FAKE_MAX_DEV] = {-1, -1, -1, -1, -1, -1, -1, -1};
__thread int ctx_stack[16]; __thread int ctx_top = -1; /* index into ctxs, -1 none */

/* charge n bytes on dev; OOM when the device is full and no resident
   managed memory can be evicted to make room (every ordinary path charges
   here: allocations, pitch, arrays, pool growth, VMM, contexts, heap) */
int dev_charge(int dev, u64 n) {
  reap_dead();
  int p = proc_slot();
  u64 now = __atomic_add_fetch(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
  if (now + __atomic_load_n(&S->external[dev], __ATOMIC_SEQ_CST) > g_mem_of[dev]) {
    __atomic_fetch_sub(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
    /* without resident managed memory on the device: refused, as always */
    if (!__atomic_load_n(&S->managed_resident[dev], __ATOMIC_SEQ_CST) || managed_make_room(dev, n, &now) != OK) {
      __atomic_fetch_add(&S->refused, 1, __ATOMIC_SEQ_CST);
      return OOM;
    }
  }
  if (p >= 0) __atomic_fetch_add(&S->procs[p].used[dev], n, __ATOMIC_SEQ_CST);
  u64 pk = __atomic_load_n(&S->peak[dev], __ATOMIC_SEQ_CST);
  while (now > pk && !__atomic_compare_exchange_n(&S->peak[dev], &pk, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  __atomic_fetch_add(&S->allocs, 1, __ATOMIC_SEQ_CST);
  return OK;
}
void dev_uncharge(int dev, u64 n) {
  int p = proc_slot();
  if (p >= 0) __atomic_fetch_sub(&S->procs[p].used[dev], n, __ATOMIC_SEQ_CST);
  __atomic_fetch_sub(&S->in_use[dev], n, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&S->frees, 1, __ATOMIC_SEQ_CST);
}

int cur_ctx(void) { return ctx_top >= 0 ? ctx_stack[ctx_top] : -1; }
int cur_dev_of(void) { int c = cur_ctx(); return c >= 0 && ctxs[c].live ? ctxs[c].dev : -1; }

u64 new_va(u64 size) { u64 k = next_ptr; next_ptr += ((size + 0xfffff) & ~0xfffffull) + 0x100000; return k; }

void add_rec(struct rec r) {
  if (nrec == caprec) { caprec = caprec ? caprec * 2 : 1024; recs = realloc(recs, caprec * sizeof *recs); }
  recs[nrec++] = r;
}

int track(int kind, int dev, u64 size, u64 *out, int narrow) {
  pthread_mutex_lock(&mu);
  int r = dev_charge(dev, size);
  if (r == OK) {
    u64 key;
    if (narrow) { key = next_ptr32; next_ptr32 += (size + 4095) & ~4095ull; if (!size) next_ptr32 += 4096; }
    else key = new_va(size);
    add_rec((struct rec){key, size, dev, kind, cur_ctx(), -1});
    ST.allocs++;
    *out = key;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

void unknown_free(u64 key) {
  ST.unknown_frees++;
  ST.last_unknown_free = key;
  __atomic_fetch_add(&S->unknown_frees, 1, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------ contexts */
int ctx_new(int dev, int primary) {
  pthread_mutex_lock(&mu);
  int i;
  for (i = 0; i < MAXCTX && ctxs[i].live; i++) {}
  if (i == MAXCTX) { pthread_mutex_unlock(&mu); return -OOM; }
  if (g_ctx_bytes && dev_charge(dev, g_ctx_bytes) != OK) { pthread_mutex_unlock(&mu); return -OOM; }
  ctxs[i] = (struct ctx){1, dev, primary, 1, 0, 0};
  ST.contexts_live++;
  pthread_mutex_unlock(&mu);
  return i;
}
/* destroy: every allocation of the context goes (pool memory stays with its pool) */
void ctx_kill(int c) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec;) {
    if (recs[i].ctx == c && recs[i].kind != K_POOL) drop_rec(i); else i++;
  }
  if (ctxs[c].heap) dev_uncharge(ctxs[c].dev, ctxs[c].heap);
  if (ctxs[c].stack) dev_uncharge(ctxs[c].dev, ctxs[c].stack);
  if (g_ctx_bytes) dev_uncharge(ctxs[c].dev, g_ctx_bytes);
  if (ctxs[c].primary) primary_of[ctxs[c].dev] = -1;
  ctxs[c].live = 0;
  ST.contexts_live--;
  pthread_mutex_unlock(&mu);
}
int ctx_idx(CUcontext h) { u64 v = (u64)h; if (v < 0x300000ull || (v - 0x300000ull) % 0x40) return -1; u64 i = (v - 0x300000ull) / 0x40; return i < MAXCTX ? (int)i : -1; }
void set_current(int c) { if (ctx_top < 0) ctx_top = 0; ctx_stack[ctx_top] = c; }

/* ------------------------------------------------------------ streams */
int stream_ctx[MAXSTREAM]; int stream_live[MAXSTREAM];
int stream_idx(CUstream h) { u64 v = (u64)h; if (v < 0x700000ull || (v - 0x700000ull) % 0x40) return -1; u64 i = (v - 0x700000ull) / 0x40; return i < MAXSTREAM && stream_live[i] ? (int)i : -1; }
/* device of a stream: its context's; NULL/legacy/per-thread: the current one */
int stream_dev(CUstream s) {
  if ((u64)s <= 2) return cur_dev;
  int i = stream_idx(s);
  if (i < 0 || !ctxs[stream_ctx[i]].live) return -1;
  return ctxs[stream_ctx[i]].dev;
}


/* ------------------------------------------------------------ implementations */

void fake_env(void) {
  const char *e;
  if ((e = getenv("FAKE_CUDA_CTX_BYTES"))) g_ctx_bytes = strtoull(e, 0, 0);
  if ((e = getenv("FAKE_CUDA_POOL_GRAN")) && strtoull(e, 0, 0)) g_pool_gran = strtoull(e, 0, 0);
  if ((e = getenv("FAKE_CUDA_PITCH_ALIGN")) && strtoull(e, 0, 0)) g_pitch_align = strtoull(e, 0, 0);
  managed_env();
  /* VMM handle values: a driver may hand out any 64-bit value */
  if ((e = getenv("FAKE_CUDA_HANDLE_BASE")) && next_handle == 0x50000000ull) next_handle = strtoull(e, 0, 0);
}
/* MPS client (tests/fake/fake_mps_control.c): like the real libcuda, CUDA
   initialisation reads CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps),
   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from
   the environment as it is then (measured on the H200: a process may change
   them before init, and unsetting the pipe directory leaves MPS), and runs as
   an MPS client when <dir>/control answers, as a plain process otherwise
   (no error). Once per process: a forked child connects at its own first
   cuInit. A client keeps its connection for its life (the daemon's client
   list: its end is the client's); the daemon's answer is the active thread
   percentage it runs at. fakeMpsClientInfo reports what this process ran with,
   and CU_DEVICE_ATTRIBUTE_MPS_ENABLED (133 in cuda.h) says whether it is a
   client: 1 when the daemon took it, 0 when it runs outside MPS. */
static char g_mps_info[640];
static int g_mps_enabled;
static int g_mps_pid;
static int g_mps_fd = -1;
static pthread_mutex_t mps_mu = PTHREAD_MUTEX_INITIALIZER;
/* a fork while another thread talks to the daemon must not leave the child's
   first cuInit waiting on a lock nobody will release; the child is not its
   parent's client (its own cuInit connects) */
static void mps_atfork_child(void) {
  pthread_mutex_init(&mps_mu, 0);
  if (g_mps_fd >= 0) { close(g_mps_fd); g_mps_fd = -1; }
}
__attribute__((constructor)) static void mps_ctor(void) { pthread_atfork(0, 0, mps_atfork_child); }
/* an environment value as one token of the client line: bounded, no spaces
   or control characters, "-" when unset */
static void mps_token(char *out, size_t cap, const char *v) {
  if (!v) { snprintf(out, cap, "-"); return; }
  size_t i = 0;
  for (; v[i] && i + 1 < cap; i++) out[i] = ((unsigned char)v[i] <= 0x20 || v[i] == 0x7f) ? '?' : v[i];
  out[i] = 0;
}
static void mps_client_init(void) {
  pthread_mutex_lock(&mps_mu);
  if (g_mps_pid == getpid()) { pthread_mutex_unlock(&mps_mu); return; }
  g_mps_pid = getpid();
  const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (!dir || !*dir) dir = "/tmp/nvidia-mps";
  char pct[128], mem[128], pipe[200], line[600], rep[32];
  mps_token(pct, sizeof pct, getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  mps_token(mem, sizeof mem, getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  mps_token(pipe, sizeof pipe, dir);
  snprintf(g_mps_info, sizeof g_mps_info, "mps=0");
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int ok = 0, fd = -1;
  if (snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir) < (int)sizeof a.sun_path &&
      (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0) {
    struct timeval tv = {5, 0}; /* a wedged daemon does not hang the application */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int n = snprintf(line, sizeof line, "client pid=%d pct=%s mem=%s pipe=%s\n", (int)getpid(), pct, mem, pipe);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && send(fd, line, (size_t)n, MSG_NOSIGNAL) == n) {
      size_t got = 0; ssize_t r;
      while (got < sizeof rep - 1 && (r = recv(fd, rep + got, sizeof rep - 1 - got, 0)) > 0) {
        got += (size_t)r; rep[got] = 0;
        if (strchr(rep, '\n')) break;
      }
      rep[got] = 0;
      ok = !strncmp(rep, "ok", 2) && (rep[2] == '\n' || rep[2] == ' ');
    }
    if (ok) g_mps_fd = fd; /* held: the client's life */
    else close(fd);
  }
  if (ok) snprintf(g_mps_info, sizeof g_mps_info, "mps=1 pct=%s mem=%s pipe=%s", pct, mem, pipe);
  g_mps_enabled = ok;
  pthread_mutex_unlock(&mps_mu);
}
/* fakeMpsClientInfo (fake_exports.c): -1 before this process's first cuInit */
int fake_mps_info(char *buf, size_t n) {
  if (!buf || !n) return -1;
  pthread_mutex_lock(&mps_mu);
  int inited = g_mps_pid == getpid();
  int r = snprintf(buf, n, "%s", inited ? g_mps_info : "uninit");
  pthread_mutex_unlock(&mps_mu);
  return inited ? r : -1;
}
CUresult i_cuInit(unsigned f) { (void)f; fake_init(); fake_env(); mps_client_init(); return OK; }
CUresult i_cuDriverGetVersion(int *v) { if (!v) return INVALID_VALUE; *v = 13000; return OK; }
CUresult i_cuDeviceGetCount(int *n) { CHECK_INIT(); if (!n) return INVALID_VALUE; *n = g_ndev; return OK; }
CUresult i_cuDeviceGet(CUdevice *d, int o) { CHECK_INIT(); if (!d) return INVALID_VALUE; if (o < 0 || o >= g_ndev) return INVALID_DEVICE; *d = o; return OK; }
void uuid_of(int dev, unsigned char u[16]) { for (int i = 0; i < 16; i++) u[i] = 0x11 * (i % 15 + 1); u[0] = 0xfa; u[1] = 0xce; u[15] = (unsigned char)dev; }
CUresult i_cuDeviceGetUuid(unsigned char *u, CUdevice d) { CHECK_INIT(); if (!u) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; uuid_of(d, u); return OK; }
CUresult i_cuDeviceTotalMem_v2(size_t *b, CUdevice d) { CHECK_INIT(); if (!b) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE; *b = g_mem_of[d]; return OK; }
CUresult i_cuDeviceTotalMem(unsigned *b, CUdevice d) { ST.calls_legacy++; size_t t; CUresult r = i_cuDeviceTotalMem_v2(b ? &t : 0, d); if (r == OK) *b = t > 0xffffffffu ? 0xffffffffu : (unsigned)t; return r; }
CUresult i_cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d) {
  (void)f; CHECK_INIT(); if (!c) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = ctx_new(d, 0); if (i < 0) return -i;
  if (ctx_top < 15) ctx_stack[++ctx_top] = i; /* pushed as current */
  *c = CTX_H(i); return OK;
}
CUresult i_cuCtxCreate(CUcontext *c, unsigned f, CUdevice d) { ST.calls_legacy++; return i_cuCtxCreate_v2(c, f, d); }
CUresult i_cuCtxCreate_v3(CUcontext *c, void *p, int n, unsigned f, CUdevice d) { (void)p; (void)n; return i_cuCtxCreate_v2(c, f, d); }
CUresult i_cuCtxCreate_v4(CUcontext *c, void *p, unsigned f, CUdevice d) { (void)p; return i_cuCtxCreate_v2(c, f, d); }
CUresult i_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  CHECK_INIT(); if (!c) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = primary_of[d];
  if (i >= 0) { pthread_mutex_lock(&mu); ctxs[i].refs++; pthread_mutex_unlock(&mu); }
  else { i = ctx_new(d, 1); if (i < 0) return -i; primary_of[d] = i; }
  *c = CTX_H(i); return OK;
}
CUresult i_cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = primary_of[d]; if (i < 0) return INVALID_CONTEXT;
  if (--ctxs[i].refs == 0) ctx_kill(i);
  return OK;
}
CUresult i_cuDevicePrimaryCtxRelease(CUdevice d) { ST.calls_legacy++; return i_cuDevicePrimaryCtxRelease_v2(d); }
CUresult i_cuDevicePrimaryCtxReset_v2(CUdevice d) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  int i = primary_of[d]; if (i >= 0) ctx_kill(i);
  return OK;
}
CUresult i_cuDevicePrimaryCtxReset(CUdevice d) { ST.calls_legacy++; return i_cuDevicePrimaryCtxReset_v2(d); }
CUresult i_cuDevicePrimaryCtxGetState(CUdevice d, unsigned *fl, int *active) {
  CHECK_INIT(); if (d < 0 || d >= g_ndev) return INVALID_DEVICE; if (!fl || !active) return INVALID_VALUE;
  *fl = 0; *active = primary_of[d] >= 0; return OK;
}
CUresult i_cuCtxDestroy_v2(CUcontext c) {
  CHECK_INIT(); int i = ctx_idx(c); if (i < 0 || !ctxs[i].live) return INVALID_CONTEXT;
  ctx_kill(i);
  for (int k = 0; k <= ctx_top; k++) if (ctx_stack[k] == i) ctx_stack[k] = -1;
  return OK;
}
CUresult i_cuCtxDestroy(CUcontext c) { ST.calls_legacy++; return i_cuCtxDestroy_v2(c); }
CUresult i_cuCtxSetCurrent(CUcontext c) {
  CHECK_INIT();
  if (!c) { if (ctx_top >= 0) ctx_stack[ctx_top] = -1; return OK; }
  int i = ctx_idx(c); if (i < 0 || !ctxs[i].live) return INVALID_CONTEXT;
  set_current(i); return OK;
}
CUresult i_cuCtxGetCurrent(CUcontext *c) { CHECK_INIT(); if (!c) return INVALID_VALUE; int i = cur_ctx(); *c = i >= 0 ? CTX_H(i) : 0; return OK; }
CUresult i_cuCtxPushCurrent_v2(CUcontext c) { CHECK_INIT(); int i = ctx_idx(c); if (i < 0 || !ctxs[i].live) return INVALID_CONTEXT; if (ctx_top >= 15) return INVALID_VALUE; ctx_stack[++ctx_top] = i; return OK; }
CUresult i_cuCtxPopCurrent_v2(CUcontext *c) { CHECK_INIT(); if (ctx_top < 0) return INVALID_CONTEXT; int i = ctx_stack[ctx_top--]; if (c) *c = i >= 0 ? CTX_H(i) : 0; return OK; }
CUresult i_cuCtxGetDevice(CUdevice *d) { CHECK_INIT(); if (!d) return INVALID_VALUE; if (cur_dev < 0) return INVALID_CONTEXT; *d = cur_dev; return OK; }
CUresult i_cuCtxSynchronize(void) { CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; UNSAFE_CALL(); pools_sync(); return OK; }
CUresult i_cuCtxSetLimit(int lim, size_t v) {
  CHECK_INIT(); int c = cur_ctx(); if (c < 0 || !ctxs[c].live) return INVALID_CONTEXT;
  if (lim != 2 && lim != 0) return OK;
  /* heap: above the 8 MiB default; stack: local memory for every resident thread */
  u64 *cur = lim == 2 ? &ctxs[c].heap : &ctxs[c].stack;
  u64 want = lim == 2 ? (v > (8u << 20) ? v - (8u << 20) : 0) : (v > 1024 ? (v - 1024) * FAKE_SMS * FAKE_THREADS_PER_SM : 0);
  pthread_mutex_lock(&mu);
  int r = OK;
  if (want > *cur) { r = dev_charge(ctxs[c].dev, want - *cur); if (r == OK) *cur = want; }
  else { dev_uncharge(ctxs[c].dev, *cur - want); *cur = want; }
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult i_cuCtxGetLimit(size_t *v, int lim) { CHECK_INIT(); int c = cur_ctx(); if (!v) return INVALID_VALUE; if (c < 0) return INVALID_CONTEXT; *v = lim == 2 ? ctxs[c].heap + (8u << 20) : lim == 0 ? ctxs[c].stack / (FAKE_SMS * FAKE_THREADS_PER_SM) + 1024 : 0; return OK; }
CUresult i_cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  CHECK_INIT(); if (!v) return INVALID_VALUE; if (d < 0 || d >= g_ndev) return INVALID_DEVICE;
  if (attr == 16) { *v = FAKE_SMS; return OK; }
  if (attr == 39) { *v = FAKE_THREADS_PER_SM; return OK; }
  if (attr == 11) { *v = (int)FAKE_MAX_PITCH; return OK; } /* MAX_PITCH */
  if (attr == 133) { /* MPS_ENABLED: this process's first cuInit joined a daemon */
    pthread_mutex_lock(&mps_mu); *v = g_mps_pid == getpid() && g_mps_enabled; pthread_mutex_unlock(&mps_mu); return OK;
  }
  *v = 0; return OK;
}

CUresult i_cuStreamCreate(CUstream *s, unsigned f) {
  (void)f; CHECK_INIT(); if (!s) return INVALID_VALUE; int c = cur_ctx(); if (c < 0 || !ctxs[c].live) return INVALID_CONTEXT;
  for (int i = 0; i < MAXSTREAM; i++) if (!stream_live[i]) { stream_live[i] = 1; stream_ctx[i] = c; *s = STREAM_H(i); return OK; }
  return OOM;
}
CUresult i_cuStreamDestroy_v2(CUstream s) { CHECK_INIT(); int i = stream_idx(s); if (i < 0) return INVALID_VALUE; stream_live[i] = 0; return OK; }
CUresult i_cuStreamGetCtx(CUstream s, CUcontext *c) {
  CHECK_INIT(); if (!c) return INVALID_VALUE;
  if ((u64)s <= 2) { int i = cur_ctx(); if (i < 0) return INVALID_CONTEXT; *c = CTX_H(i); return OK; }
  int i = stream_idx(s); if (i < 0) return INVALID_VALUE; *c = CTX_H(stream_ctx[i]); return OK;
}
CUresult i_cuStreamSynchronize(CUstream s) {
  CHECK_INIT(); if ((u64)s > 2 && stream_idx(s) < 0) return INVALID_VALUE;
  int ci = cap_of(s);
  if (ci >= 0) { caps[ci].invalid = 1; __atomic_fetch_add(&capture_violations, 1, __ATOMIC_SEQ_CST); return E_CAP_UNSUPPORTED; }
  if (legacy_conflict(s)) { cap_invalidate_prohibiting(); __atomic_fetch_add(&capture_violations, 1, __ATOMIC_SEQ_CST); return E_CAP_IMPLICIT; }
  UNSAFE_CALL(); pools_sync(); return OK;
}
CUresult i_cuStreamSynchronize_ptsz(CUstream s) { ST.calls_ptsz++; return i_cuStreamSynchronize(s); }
CUresult i_cuEventSynchronize(void *e) { CHECK_INIT(); (void)e; UNSAFE_CALL(); pools_sync(); return OK; }

CUresult i_cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
  CHECK_INIT(); if (!data) return INVALID_VALUE;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nrec; i++) {
    struct rec *r = &recs[i];
    if ((r->kind == K_PTR || r->kind == K_POOL || r->kind == K_MANAGED) && p >= r->key && p < r->key + (r->size ? r->size : 1)) {
      u64 start = r->key; int dev = r->dev, managed = r->kind == K_MANAGED;
      pthread_mutex_unlock(&mu);
      if (attr == 11) { *(u64 *)data = start; return OK; }      /* RANGE_START_ADDR */
      if (attr == 9) { *(int *)data = dev; return OK; }          /* DEVICE_ORDINAL */
      if (attr == 8) { *(int *)data = managed; return OK; }      /* IS_MANAGED */
      /* MEMORY_TYPE: CU_MEMORYTYPE_DEVICE, managed memory too wherever its
         pages are (the runtime's documentation: managed memory may report
         device or host regardless of its physical location) */
      if (attr == 2) { *(unsigned *)data = 2; return OK; }
      return INVALID_VALUE;
    }
  }
  pthread_mutex_unlock(&mu);
  return INVALID_VALUE;
}

CUresult i_cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE; UNSAFE_CALL();
  u64 k; int r = track(K_PTR, cur_dev, n, &k, 0); if (r == OK) *p = k; return r;
}
CUresult i_cuMemAlloc(unsigned *p, unsigned n) {
  ST.calls_legacy++;
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !n) return INVALID_VALUE; UNSAFE_CALL();
  u64 k; int r = track(K_PTR, cur_dev, n, &k, 1); if (r == OK) *p = (unsigned)k; return r;
}
/* CU_DEVICE_ATTRIBUTE_MAX_PITCH (11): wider rows are invalid, as are
   sizes that do not fit in 64 bits (the driver's answer to both:
   CUDA_ERROR_INVALID_VALUE) */
CUresult i_cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !pitch || !w || !h || (e != 4 && e != 8 && e != 16)) return INVALID_VALUE;
  if (w > FAKE_MAX_PITCH) return INVALID_VALUE;
  UNSAFE_CALL();
  size_t pt = (w + g_pitch_align - 1) / g_pitch_align * g_pitch_align; u64 bytes;
  if (__builtin_mul_overflow((u64)pt, (u64)h, &bytes)) return INVALID_VALUE;
  u64 k; int r = track(K_PTR, cur_dev, bytes, &k, 0);
  if (r == OK) { *p = k; *pitch = pt; } return r;
}
CUresult i_cuMemAllocPitch(unsigned *p, unsigned *pitch, unsigned w, unsigned h, unsigned e) {
  ST.calls_legacy++;
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!p || !pitch || !w || !h || (e != 4 && e != 8 && e != 16)) return INVALID_VALUE;
  UNSAFE_CALL();
  unsigned pt = (unsigned)((w + g_pitch_align - 1) / g_pitch_align * g_pitch_align); u64 k; int r = track(K_PTR, cur_dev, (u64)pt * h, &k, 1);
  if (r == OK) { *p = (unsigned)k; *pitch = pt; } return r;
}
CUresult i_cuMemFree_v2(CUdeviceptr p) { CHECK_INIT(); UNSAFE_CALL(); return untrack(K_PTR, p); }
CUresult i_cuMemFree(unsigned p) { ST.calls_legacy++; CHECK_INIT(); UNSAFE_CALL(); return untrack(K_PTR, p); }
u64 fmt_bytes(unsigned f) { switch (f) { case 1: case 8: return 1; case 2: case 9: case 0x10: return 2; default: return 4; } }
CUresult arr_make(u64 bytes, void **h, int kind) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!h) return INVALID_VALUE; UNSAFE_CALL();
  u64 k; int r = track(kind, cur_dev, bytes, &k, 0); if (r == OK) *h = (void *)k; return r;
}
CUresult i_cuArrayCreate_v2(void **h, const struct adesc *d) { if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make(MX(d->w) * MX(d->h) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
CUresult i_cuArrayCreate(void **h, const struct adesc1 *d) { ST.calls_legacy++; if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make((u64)MX(d->w) * MX(d->h) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
CUresult i_cuArray3DCreate_v2(void **h, const struct a3desc *d) { if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make(MX(d->w) * MX(d->h) * MX(d->d) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
CUresult i_cuArray3DCreate(void **h, const struct a3desc1 *d) { ST.calls_legacy++; if (!d || BADCH(d->ch)) return INVALID_VALUE; return arr_make((u64)MX(d->w) * MX(d->h) * MX(d->d) * fmt_bytes(d->fmt) * MX(d->ch), h, K_ARRAY); }
CUresult i_cuArrayDestroy(void *h) { CHECK_INIT(); return untrack(K_ARRAY, (u64)h); }
CUresult i_cuMipmappedArrayCreate(void **h, const struct a3desc *d, unsigned levels) {
  if (!d || !levels || BADCH(d->ch)) return INVALID_VALUE;
  u64 tot = 0; size_t w = d->w, hh = d->h, dd = d->d;
  for (unsigned l = 0; l < levels; l++) { tot += MX(w) * MX(hh) * MX(dd) * fmt_bytes(d->fmt) * MX(d->ch); w = w > 1 ? w / 2 : 1; hh = hh > 1 ? hh / 2 : hh; dd = dd > 1 ? dd / 2 : dd; }
  return arr_make(tot, h, K_MIPMAP);
}
CUresult i_cuMipmappedArrayDestroy(void *h) { CHECK_INIT(); return untrack(K_MIPMAP, (u64)h); }

CUresult i_cuMemGetInfo_v2(size_t *fr, size_t *tot) {
  CHECK_INIT(); if (need_ctx()) return INVALID_CONTEXT; if (!fr && !tot) return INVALID_VALUE; UNSAFE_CALL();
  u64 used = __atomic_load_n(&S->in_use[cur_dev], __ATOMIC_SEQ_CST) + __atomic_load_n(&S->external[cur_dev], __ATOMIC_SEQ_CST);
  u64 mem = g_mem_of[cur_dev];
  if (fr) *fr = used > mem ? 0 : mem - used;
  if (tot) *tot = mem;
  return OK;
}
CUresult i_cuMemGetInfo(unsigned *fr, unsigned *tot) {
  ST.calls_legacy++; size_t a, b; CUresult r = i_cuMemGetInfo_v2(fr ? &a : 0, tot ? &b : 0);
  if (r) return r; if (fr) *fr = a > 0xffffffffu ? 0xffffffffu : (unsigned)a; if (tot) *tot = b > 0xffffffffu ? 0xffffffffu : (unsigned)b; return OK;
}
