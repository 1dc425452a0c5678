/* The host's side of the grant file (formats/src/grant.rs), for the
   interceptor tests:
     grant_tool write FILE DEV:BYTES[:LIMIT[:PRIORITY]]...
                                         a grant of the fake's GPUs DEV (their
                                         UUIDs as tests/fake computes them); a
                                         LIMIT makes the file version 3, that
                                         entry a burstable slice
     grant_tool set FILE ENTRY BYTES     change entry ENTRY's live vram_bytes
                                         with one atomic store through a
                                         shared mapping, as the host does */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#define HEADER 64
#define ENTRY 64
#define MAXG 16
#define SIZE (HEADER + MAXG * ENTRY)
#define VRAM_AT(i) (HEADER + (i) * ENTRY + 24)
static void uuid_of(int dev, unsigned char u[16]) { for (int i = 0; i < 16; i++) u[i] = 0x11 * (i % 15 + 1); u[0] = 0xfa; u[1] = 0xce; u[15] = (unsigned char)dev; }
int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "write")) {
    static unsigned char b[SIZE];
    unsigned long long magic; memcpy(&magic, "GQGRANT1", 8);
    unsigned version = 1, n = argc - 3;
    memcpy(b, &magic, 8); memcpy(b + 8, &version, 4); memcpy(b + 12, &n, 4);
    for (unsigned i = 0; i < n && i < MAXG; i++) {
      int dev = atoi(argv[3 + i]); const char *c = strchr(argv[3 + i], ':');
      char *rest = 0;
      unsigned long long v = c ? strtoull(c + 1, &rest, 0) : 0; unsigned idx = dev;
      unsigned char *e = b + HEADER + i * ENTRY;
      uuid_of(dev, e); memcpy(e + 16, &idx, 4); memcpy(e + 24, &v, 8);
      if (rest && *rest == ':') {
        unsigned long long limit = strtoull(rest + 1, &rest, 0);
        unsigned prio = (rest && *rest == ':') ? (unsigned)strtoul(rest + 1, 0, 0) : 0, v3 = 3;
        memcpy(e + 44, &prio, 4); memcpy(e + 48, &limit, 8); memcpy(b + 8, &v3, 4);
      }
    }
    FILE *f = fopen(argv[2], "w"); if (!f) return 1;
    fwrite(b, 1, sizeof b, f); return fclose(f) != 0;
  }
  if (argc == 5 && !strcmp(argv[1], "set")) {
    int fd = open(argv[2], O_RDWR); if (fd < 0) { perror("open"); return 1; }
    unsigned char *m = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) { perror("mmap"); return 1; }
    __atomic_store_n((unsigned long long *)(m + VRAM_AT(atoi(argv[3]))), strtoull(argv[4], 0, 0), __ATOMIC_RELEASE);
    munmap(m, SIZE); close(fd); return 0;
  }
  fprintf(stderr, "usage: grant_tool write FILE DEV:BYTES... | set FILE ENTRY BYTES\n");
  return 2;
}
