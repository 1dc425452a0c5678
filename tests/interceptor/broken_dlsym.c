/* Negative control for the RTLD_NEXT test: a dlsym override that calls the
   real dlsym and returns its result (no tail call), like a naive
   interceptor. With it in front of mallochook.so the test must fail. */
#define _GNU_SOURCE
#include <dlfcn.h>
static void *(*real)(void *, const char *);
volatile unsigned long calls;
void *dlsym(void *h, const char *n) {
  if (!real) real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real) real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  void *r = real(h, n);
  calls++; /* work after the call: no tail call, RTLD_NEXT now relative to us */
  return r;
}
