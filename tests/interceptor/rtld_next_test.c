/* Under LD_PRELOAD="libgpuquota.so mallochook.so": malloc must go through
   the interposer to the real malloc, and dlsym(RTLD_NEXT) must keep working
   for this program too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
  char *p = malloc(100);
  if (!p) return 1;
  strcpy(p, "hello");
  unsigned long *calls = dlsym(RTLD_DEFAULT, "mallochook_calls");
  if (!calls || *calls == 0) { fprintf(stderr, "interposer not used (calls=%p)\n", (void *)calls); return 1; }
  /* RTLD_NEXT from the main program: the next 'puts' after us is libc's */
  void *np = dlsym(RTLD_NEXT, "puts");
  Dl_info di;
  if (!np || !dladdr(np, &di) || !strstr(di.dli_fname, "libc.so")) { fprintf(stderr, "RTLD_NEXT puts -> %s\n", np ? di.dli_fname : "NULL"); return 1; }
  /* dlerror semantics intact for a missing name */
  if (dlsym(RTLD_DEFAULT, "no_such_symbol_xyz") != NULL || dlerror() == NULL) { fprintf(stderr, "dlerror broken\n"); return 1; }
  free(p);
  printf("rtld_next ok (%lu mallocs through the interposer)\n", *calls);
  return 0;
}
