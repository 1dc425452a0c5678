/* An MPS client for tests/fake/test_mps_control.sh and tests/e2e/mps.rs: loads
 * the fake libcuda (dlopen, path in argv[1]), applies NAME=VALUE (setenv) and
 * -NAME (unsetenv) arguments to its own environment, as an application may do
 * before CUDA initialisation, calls cuInit and prints what fakeMpsClientInfo
 * reports (its pid on a second line). --fork: also a forked child's cuInit and
 * info. --retry SECS: a failed cuInit is tried again every 100 ms for up to
 * SECS seconds (stderr: the first failure, then "served after N ms" once one
 * succeeds). --attr: print CU_DEVICE_ATTRIBUTE_MPS_ENABLED of device 0 after
 * the pid ("mps_enabled=N"). --hold [SECS]: then stays (a client holds its
 * place until it ends), SECS seconds or until killed.
 *
 * Built a second time with -DPROBE_STATIC and the fake libcuda linked in,
 * statically (mps_client_probe_static): a program no preload reaches, as a
 * static CUDA binary; argv[1] is then ignored. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef PROBE_STATIC
int cuInit(unsigned);
int fakeMpsClientInfo(char *, size_t);
int cuDeviceGetAttribute(int *, int, int);
#endif

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s LIBCUDA [NAME=VALUE|-NAME|--fork|--attr|--retry SECS|--hold [SECS]]...\n", argv[0]); return 2; }
  int do_fork = 0, hold = 0, hold_secs = 0, retry = 0, attr = 0;
  for (int i = 2; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!strcmp(argv[i], "--fork")) do_fork = 1;
    else if (!strcmp(argv[i], "--attr")) attr = 1;
    else if (!strcmp(argv[i], "--retry") && i + 1 < argc) retry = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hold")) {
      hold = 1;
      if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') hold_secs = atoi(argv[++i]);
    }
    else if (argv[i][0] == '-') unsetenv(argv[i] + 1);
    else if (eq) { *eq = 0; setenv(argv[i], eq + 1, 1); }
  }
#ifdef PROBE_STATIC
  int (*init)(unsigned) = cuInit;
  int (*info)(char *, size_t) = fakeMpsClientInfo;
  int (*get)(int *, int, int) = cuDeviceGetAttribute;
#else
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*info)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "fakeMpsClientInfo");
  if (!init || !info) { fprintf(stderr, "missing cuInit or fakeMpsClientInfo\n"); return 2; }
  int (*get)(int *, int, int) = (int (*)(int *, int, int))dlsym(h, "cuDeviceGetAttribute");
#endif
  char buf[700];
  if (info(buf, sizeof buf) != -1) { fprintf(stderr, "info before cuInit: %s\n", buf); return 3; }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int r = init(0), first = r;
  if (r != 0) fprintf(stderr, "cuInit: %d\n", r);
  while (r != 0 && retry > 0) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec >= retry) break;
    usleep(100000);
    r = init(0);
  }
  if (r != 0) { if (first != r) fprintf(stderr, "cuInit: %d\n", r); return 3; }
  if (first != 0) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "served after %ld ms\n", (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
  }
  if (info(buf, sizeof buf) < 0) { fprintf(stderr, "info after cuInit failed\n"); return 3; }
  printf("%s\npid=%d\n", buf, (int)getpid());
  if (attr) {
    int v = -1;
    if (!get || get(&v, 133, 0) != 0) v = -1;
    printf("mps_enabled=%d\n", v);
  }
  fflush(stdout);
  if (do_fork) {
    pid_t c = fork();
    if (c == 0) {
      /* a child is not a client before its own cuInit */
      if (info(buf, sizeof buf) != -1) { fprintf(stderr, "child info before cuInit: %s\n", buf); _exit(3); }
      int cr = init(0);
      if (cr != 0) { fprintf(stderr, "child cuInit: %d\n", cr); _exit(3); }
      if (info(buf, sizeof buf) < 0) _exit(3);
      printf("child %s\npid=%d\n", buf, (int)getpid());
      fflush(stdout);
      _exit(0);
    }
    int st; waitpid(c, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) return 3;
  }
  if (hold && hold_secs > 0) sleep((unsigned)hold_secs);
  else while (hold) pause();
  return 0;
}
