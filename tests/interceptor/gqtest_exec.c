/* gqtest: exec, zombies, fork during initialisation, fail-closed refusal.
   Part of gqtest (tests/interceptor/gqtest.c has main and the API table). */
#include "gqtest.h"

/* exec: the same pid and start time, a new image: the old charge goes */
int t_execself(const char *self, u64 bytes) {
  ctx_on(0);
  u64 p; REQUIRE(A.cuMemAlloc(&p, bytes) == 0, "alloc before exec");
  char s1[32], s2[32]; snprintf(s1, sizeof s1, "%llu", (unsigned long long)envu("GQ_SLICE", 0)); snprintf(s2, sizeof s2, "%llu", (unsigned long long)(8 * MiB));
  execl(self, self, "fill", s1, s2, (char *)0);
  fprintf(stderr, "exec failed\n");
  return 1;
}

/* a zombie holds no memory: its charge goes whoever reaps it (here: later) */
int t_zombie(u64 bytes) {
  u64 slice = envu("GQ_SLICE", 0);
  pid_t pid = fork();
  if (pid == 0) {
    ctx_on(0);
    u64 p; if (A.cuMemAlloc(&p, bytes) != 0) _exit(1);
    _exit(0); /* exits holding it */
  }
  char path[64], buf[512]; snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int z = 0;
  for (int i = 0; i < 500 && !z; i++) {
    FILE *f = fopen(path, "r"); if (f) { size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = 0; fclose(f); char *c = strrchr(buf, ')'); z = c && c[2] == 'Z'; }
    if (!z) usleep(10000);
  }
  REQUIRE(z, "child did not become a zombie");
  int r = t_fill(slice, 8 * MiB);
  int st; waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
  return r | (failures ? 1 : 0);
}

/* a fork() while another thread is in the very first initialisation */
static void *forkinit_thread(void *h) { dlsym(h, "cuMemGetInfo_v2"); return 0; }
int t_forkinit(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h, "dlopen");
  pthread_t th; pthread_create(&th, 0, forkinit_thread, h);
  usleep(300000); /* the thread now blocks reading the limits FIFO, mid-initialisation */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(8);
    void *f = dlsym(h, "cuMemAlloc_v2"); /* must not spin on the parent's initialisation */
    _exit(f ? 0 : 3);
  }
  int st; waitpid(pid, &st, 0);
  pthread_join(th, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child of a fork during the first initialisation: status %d (killed by SIGALRM = spun)", st);
  return failures ? 1 : 0;
}

/* everything refused (broken limits file: fail closed) */
int t_refuse(void) {
  ctx_on(0);
  u64 p; CUresult r = A.cuMemAlloc(&p, MiB);
  CHECK(r == 2, "alloc with a broken limits file returned %d, want 2", r);
  CHECK(info_free() == 0, "cuMemGetInfo reports %zu free although nothing can be allocated", info_free());
  struct prop pr = {1, 0, 1, 0, 0, 0};
  u64 h; CHECK(A.cuMemCreate(&h, 2 * MiB, &pr, 0) == 2, "cuMemCreate not refused");
  CHECK(A.cuMemAllocAsync(&p, MiB, 0) == 2, "cuMemAllocAsync not refused");
  return failures ? 1 : 0;
}
