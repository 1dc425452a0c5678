/* Reads a usage file through include/gpuquota_usage.h (the host-tool view):
   usage_dump FILE [DEV] prints header fields and the container's usage.
   usage_dump --forge FILE version|layout writes a v1-sized file whose header
   is right except for one field (fail-closed tests).
   usage_dump --set-limit FILE DEV BYTES writes the header's limit of DEV in
   place, as any process of the container could. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "gpuquota_usage.h"
static int forge(const char *path, const char *what) {
  static unsigned char b[GQ_USAGE_TOTAL_SIZE];
  struct gq_usage_header *h = (void *)b;
  h->magic = GQ_USAGE_MAGIC; h->version = GQ_USAGE_VERSION; h->header_size = GQ_USAGE_HEADER_SIZE;
  h->slot_count = GQ_USAGE_SLOT_COUNT; h->dev_count = GQ_USAGE_DEV_COUNT; h->slot_size = GQ_USAGE_SLOT_SIZE;
  h->slot_used_offset = 64; h->slots_offset = GQ_USAGE_HEADER_SIZE;
  if (!strcmp(what, "version")) h->version = 2;
  else if (!strcmp(what, "layout")) h->slot_count = 4096; /* would index past the file */
  else return 2;
  FILE *f = fopen(path, "w"); if (!f) return 1;
  fwrite(b, 1, sizeof b, f); fclose(f); return 0;
}
int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "--forge")) return argc < 4 ? 2 : forge(argv[2], argv[3]);
  if (!strcmp(argv[1], "--set-limit") && argc == 5) {
    int fd = open(argv[2], O_RDWR); if (fd < 0) { perror("open"); return 1; }
    unsigned char *b = mmap(0, GQ_USAGE_TOTAL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED) return 1;
    __atomic_store_n(&((struct gq_usage_header *)b)->limit[atoi(argv[3])], strtoull(argv[4], 0, 0), __ATOMIC_SEQ_CST);
    return 0;
  }
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0) { perror("open"); return 1; }
  off_t sz = lseek(fd, 0, SEEK_END);
  if (sz < (off_t)GQ_USAGE_TOTAL_SIZE) { printf("size=%lld uninitialised\n", (long long)sz); return 1; }
  const unsigned char *b = mmap(0, GQ_USAGE_TOTAL_SIZE, PROT_READ, MAP_SHARED, fd, 0);
  if (b == MAP_FAILED) return 1;
  const struct gq_usage_header *h = (const void *)b;
  if (h->magic != GQ_USAGE_MAGIC || h->version != GQ_USAGE_VERSION) { printf("bad magic/version\n"); return 1; }
  int dev = argc > 2 ? atoi(argv[2]) : 0;
  printf("version=%u slots=%u devs=%u slot_size=%u high_water=%u flags=%u limit=%llu overhead=%llu container=%s\n",
         h->version, h->slot_count, h->dev_count, h->slot_size, h->high_water, h->flags,
         (unsigned long long)h->limit[dev], (unsigned long long)h->context_overhead_bytes, h->container_id);
  printf("used=%llu live_slots=%u uuid_state=%u\n", (unsigned long long)gq_usage_used(b, dev), gq_usage_live_slots(b), h->uuid_state[dev]);
  return 0;
}
