// benches/start_phases.sh's timer: `tsexec LOG PROG ARGS...` runs PROG as a
// child and appends "start NS" and "end NS" (CLOCK_REALTIME) to LOG; exits
// with the child's status. Called by the name runc-ts (the runtime's `runc`
// in that bench), LOG is $TSLOG.runc and PROG is $REAL_RUNC; without TSLOG it
// only runs $REAL_RUNC (the runtime's own cleanup calls).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
static long long ns(void) { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(int argc, char **argv) {
  long long s = ns();
  const char *log = NULL; char lbuf[4096]; char **av;
  if (strstr(argv[0], "runc-ts")) {
    const char *real = getenv("REAL_RUNC"), *tl = getenv("TSLOG");
    if (!real) { fprintf(stderr, "runc-ts: REAL_RUNC unset\n"); return 127; }
    argv[0] = (char *)real; av = argv;
    if (!tl) { execv(real, av); return 127; }
    snprintf(lbuf, sizeof lbuf, "%s.runc", tl); log = lbuf;
  } else {
    if (argc < 3) { fprintf(stderr, "usage: tsexec LOG PROG ARGS...\n"); return 2; }
    log = argv[1]; av = argv + 2;
  }
  pid_t p = fork();
  if (p == 0) { execv(av[0], av); _exit(127); }
  int st; waitpid(p, &st, 0);
  long long e = ns();
  FILE *f = fopen(log, "a");
  if (f) { fprintf(f, "start %lld\nend %lld\n", s, e); fclose(f); }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
