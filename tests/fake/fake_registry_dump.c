/* fake-registry-dump [--reap] [REGISTRY]: the fake GPU's registry
   (fake_cuda.h) as lines, for tests: evictions, device use, each process's
   ordinary and managed bytes, each managed allocation. REGISTRY defaults to
   FAKE_CUDA_PEAK_FILE, else fake-gpu-registry beside this program (the
   library's rules). Built with the fake libcuda linked in (statically): it
   takes the registry's managed lock for a consistent snapshot.

   --reap first frees what dead processes held, as the driver does within
   about a second of a process's end (the fake otherwise frees a dead
   process's memory at the next charge by a process of its pid namespace):
   processes of this pid namespace that are gone, and those of another
   namespace that no process this one can see is (run it where every
   registered namespace is visible: the host, or the sandbox that started the
   containers).

   Output, one record a line, numbers in bytes:
     evictions N bytes B
     evict n=K victim_pid=P victim_pidns=NS dev=D bytes=B evictor_pid=E evictor_pidns=NS2
       (the last 64 records, oldest first; n counts from 0)
     dev D total=T in_use=U managed_resident=R external=X peak=K
     host managed=H
     proc pid=P pidns=NS seen_pid=Q ordinary=A managed_resident=R managed_host=H
       (pid in its own namespace, seen_pid in this program's, 0 if none;
       A and R per device, comma-separated when there are several)
     managed pid=P dev=D size=S resident=R host=H seq=Q pref=F
       (dev -1: never placed; pref -1 host, -2 none) */
#include "fake_cuda_internal.h"
#include <dirent.h>
#include <sys/stat.h>

/* the pid, in this program's pid namespace, of the process whose pid is
   `pid` in namespace `ns`; 0 when none this program can see */
static int seen_pid(int pid, unsigned ns) {
  if (ns == 0 || ns == fake_pidns()) return proc_gone(pid) ? 0 : pid;
  int found = fake_caller_pid_of(pid, ns);
  return found && !proc_gone(found) ? found : 0;
}

static void usage(void) {
  fprintf(stderr, "usage: fake-registry-dump [--reap] [REGISTRY]\n"
                  "  REGISTRY: the fake GPU's registry file (default: FAKE_CUDA_PEAK_FILE, else fake-gpu-registry beside this program)\n");
  exit(2);
}

int main(int argc, char **argv) {
  int reap = 0;
  const char *path = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reap")) reap = 1;
    else if (argv[i][0] == '-' || path) usage();
    else path = argv[i];
  }
  char beside[4096];
  if (path) setenv("FAKE_CUDA_PEAK_FILE", path, 1);
  else if ((path = getenv("FAKE_CUDA_PEAK_FILE")) && *path) {}
  else if (fake_beside((void *)main, "fake-gpu-registry", beside, sizeof beside)) path = beside;
  if (!path || access(path, R_OK | W_OK) != 0) {
    fprintf(stderr, "fake-registry-dump: no registry at %s: give its path, or set FAKE_CUDA_PEAK_FILE\n", path ? path : "(none)");
    return 2;
  }
  fake_init();
  if (reap) {
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
      int pid = __atomic_load_n(&S->procs[i].pid, __ATOMIC_SEQ_CST);
      if (pid <= 0 || pid == getpid()) continue;
      if (same_ns(i) ? !proc_gone(pid) : seen_pid(pid, S->procs[i].pidns) != 0) continue;
      if (!__atomic_compare_exchange_n(&S->procs[i].pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
      reap_slot(i);
    }
  }
  static struct fake_shared snap;
  managed_lock();
  memcpy(&snap, S, sizeof snap);
  managed_unlock();

  int ndev = g_ndev;
  for (int d = 0; d < FAKE_MAX_DEV; d++)
    if (snap.in_use[d] || snap.peak[d] || snap.managed_resident[d]) ndev = d + 1 > ndev ? d + 1 : ndev;
  printf("evictions %llu bytes %llu\n", (unsigned long long)snap.evictions, (unsigned long long)snap.evicted_bytes);
  u64 first = snap.evictions > FAKE_EVICT_RING ? snap.evictions - FAKE_EVICT_RING : 0;
  for (u64 k = first; k < snap.evictions; k++) {
    struct fake_evict *r = &snap.evict[k % FAKE_EVICT_RING];
    printf("evict n=%llu victim_pid=%d victim_pidns=%u dev=%d bytes=%llu evictor_pid=%d evictor_pidns=%u\n",
           (unsigned long long)k, r->victim_pid, r->victim_pidns, r->dev, (unsigned long long)r->bytes, r->evictor_pid, r->evictor_pidns);
  }
  for (int d = 0; d < ndev; d++)
    printf("dev %d total=%llu in_use=%llu managed_resident=%llu external=%llu peak=%llu\n", d, g_mem_of[d],
           (unsigned long long)snap.in_use[d], (unsigned long long)snap.managed_resident[d],
           (unsigned long long)snap.external[d], (unsigned long long)snap.peak[d]);
  printf("host managed=%llu\n", (unsigned long long)snap.managed_host);
  for (int i = 0; i < FAKE_MAX_PROCS; i++) {
    if (snap.procs[i].pid <= 0) continue;
    printf("proc pid=%d pidns=%u seen_pid=%d ordinary=", snap.procs[i].pid, snap.procs[i].pidns, seen_pid(snap.procs[i].pid, snap.procs[i].pidns));
    for (int d = 0; d < ndev; d++) printf("%s%llu", d ? "," : "", (unsigned long long)snap.procs[i].used[d]);
    printf(" managed_resident=");
    for (int d = 0; d < ndev; d++) printf("%s%llu", d ? "," : "", (unsigned long long)snap.mprocs[i].resident[d]);
    printf(" managed_host=%llu\n", (unsigned long long)snap.mprocs[i].host);
  }
  for (int i = 0; i < FAKE_MAX_MANAGED; i++) {
    struct fake_managed *e = &snap.managed[i];
    if (!e->live) continue;
    printf("managed pid=%d dev=%d size=%llu resident=%llu host=%llu seq=%llu pref=%d\n",
           e->slot >= 0 ? snap.procs[e->slot].pid : 0, e->dev, (unsigned long long)e->size,
           (unsigned long long)e->resident, (unsigned long long)e->host, (unsigned long long)e->seq, e->pref);
  }
  return 0;
}
