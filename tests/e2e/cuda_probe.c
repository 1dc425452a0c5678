/* A dynamic program for the container tests: talks to libcuda.so.1 through
 * dlopen/dlsym like a framework does.
 * usage: cuda_probe info | alloc GiB... | hold GiB SECS
 *        cuda_probe wait GiB GiB2 DIR: alloc GiB, try GiB2, create DIR/ready, wait up to 30 s
 *          for DIR/go, then info and GiB2 again in the same process; create DIR/again,
 *          wait for DIR/end (a running process across a resize)
 *        cuda_probe keep GiB DIR: alloc GiB, create DIR/held, wait for DIR/free, free it,
 *          create DIR/freed, wait for DIR/end (memory held, then freed, by a live process) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef int (*init_t)(unsigned);
typedef int (*devget_t)(int *, int);
typedef int (*ctx_t)(void **, unsigned, int);
typedef int (*info_t)(size_t *, size_t *);
typedef int (*alloc_t)(unsigned long long *, size_t);
int main(int argc, char **argv) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
  init_t cuInit = (init_t)dlsym(h, "cuInit");
  devget_t cuDeviceGet = (devget_t)dlsym(h, "cuDeviceGet");
  ctx_t cuCtxCreate = (ctx_t)dlsym(h, "cuCtxCreate_v2");
  info_t cuMemGetInfo = (info_t)dlsym(h, "cuMemGetInfo_v2");
  alloc_t cuMemAlloc = (alloc_t)dlsym(h, "cuMemAlloc_v2");
  int dev; void *ctx;
  /* PROBE_DEVICE=N: the CUDA device to use (default 0) */
  const char *pd = getenv("PROBE_DEVICE");
  if (cuInit(0) || cuDeviceGet(&dev, pd ? atoi(pd) : 0) || cuCtxCreate(&ctx, 0, dev)) { printf("init failed\n"); return 1; }
  if (argc > 1 && !strcmp(argv[1], "info")) {
    size_t f = 0, t = 0;
    int rc = cuMemGetInfo(&f, &t);
    printf("rc=%d total=%zu free=%zu\n", rc, t, f);
    return 0;
  }
  if (argc > 4 && !strcmp(argv[1], "wait")) {
    char p[512];
    unsigned long long a = 0, b = 0;
    size_t f = 0, t = 0;
    int rc = cuMemAlloc(&a, (size_t)(atof(argv[2]) * (1ull << 30)));
    printf("alloc %s GiB rc=%d\n", argv[2], rc);
    rc = cuMemAlloc(&b, (size_t)(atof(argv[3]) * (1ull << 30)));
    printf("alloc %s GiB rc=%d\n", argv[3], rc);
    fflush(stdout);
    snprintf(p, sizeof p, "%s/ready", argv[4]); fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/go", argv[4]);
    for (int i = 0; i < 600 && access(p, F_OK); i++) usleep(50000);
    rc = cuMemGetInfo(&f, &t);
    printf("rc=%d total=%zu free=%zu\n", rc, t, f);
    if (!b) { rc = cuMemAlloc(&b, (size_t)(atof(argv[3]) * (1ull << 30))); printf("again %s GiB rc=%d\n", argv[3], rc); }
    fflush(stdout);
    snprintf(p, sizeof p, "%s/again", argv[4]); fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/end", argv[4]);
    for (int i = 0; i < 600 && access(p, F_OK); i++) usleep(50000);
    return 0;
  }
  if (argc > 3 && !strcmp(argv[1], "keep")) {
    typedef int (*free_t)(unsigned long long);
    free_t cuMemFree = (free_t)dlsym(h, "cuMemFree_v2");
    char p[512];
    unsigned long long a = 0;
    int rc = cuMemAlloc(&a, (size_t)(atof(argv[2]) * (1ull << 30)));
    printf("alloc %s GiB rc=%d\n", argv[2], rc);
    fflush(stdout);
    snprintf(p, sizeof p, "%s/held", argv[3]); fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/free", argv[3]);
    for (int i = 0; i < 12000 && access(p, F_OK); i++) usleep(50000);
    rc = a ? cuMemFree(a) : 0;
    printf("free rc=%d\n", rc);
    fflush(stdout);
    snprintf(p, sizeof p, "%s/freed", argv[3]); fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/end", argv[3]);
    for (int i = 0; i < 12000 && access(p, F_OK); i++) usleep(50000);
    return 0;
  }
  int hold = argc > 1 && !strcmp(argv[1], "hold");
  for (int i = 2; i < argc - hold; i++) {
    unsigned long long p = 0;
    int rc = cuMemAlloc(&p, (size_t)(atof(argv[i]) * (1ull << 30)));
    printf("alloc %s GiB rc=%d\n", argv[i], rc);
    fflush(stdout);
  }
  if (hold) sleep(atoi(argv[argc - 1]));
  return 0;
}
