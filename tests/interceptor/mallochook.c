/* A malloc interposer preloaded AFTER libgpuquota.so: it finds the real
   malloc with dlsym(RTLD_NEXT, "malloc"). If libgpuquota's dlsym broke
   RTLD_NEXT (no tail call), it gets its own malloc back: detected, exit 3. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *(*real_malloc)(size_t);
static int resolving;
static char boot[65536]; static size_t boot_used;
unsigned long mallochook_calls;

void *malloc(size_t n) {
  if (!real_malloc) {
    if (resolving) { /* dlsym itself allocating */
      size_t o = (boot_used + 15) & ~(size_t)15; boot_used = o + n;
      if (boot_used > sizeof boot) abort();
      return boot + o;
    }
    resolving = 1;
    void *p = dlsym(RTLD_NEXT, "malloc");
    resolving = 0;
    if (p == (void *)malloc || p == NULL) {
      static const char m[] = "mallochook: dlsym(RTLD_NEXT, \"malloc\") returned the interposer itself\n";
      write(2, m, sizeof m - 1);
      _exit(3);
    }
    real_malloc = (void *(*)(size_t))p;
  }
  mallochook_calls++;
  return real_malloc(n);
}
