/* A static stand-in for nvidia-smi on hosts without a GPU (tests, demo):
 * an ELF program, as the hook only injects real executables, never scripts.
 * Static, so the interceptor cannot reach it: it reads the container's
 * grant from /run/gpu-quota/grant (the file the interceptor enforces;
 * formats::grant: a 64-byte header — magic "GQGRANT1", version, count — and
 * 64-byte entries: 16 bytes of UUID, the index, vram_bytes at +24, a burst
 * limit at +48 in version 3) and
 * prints, per GPU of the slice, what nvidia-smi shows there through NVML. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

int main(void) {
  unsigned char g[64 + 16 * 64];
  int n = 0;
  FILE *f = fopen("/run/gpu-quota/grant", "rb");
  if (f) {
    size_t got = fread(g, 1, sizeof g, f);
    fclose(f);
    uint64_t count = le(g + 12, 4);
    uint64_t version = le(g + 8, 4);
    if (got == sizeof g && memcmp(g, "GQGRANT1", 8) == 0 && version >= 1 && version <= 3 && count <= 16) {
      for (uint64_t i = 0; i < count; i++) {
        const unsigned char *e = g + 64 + 64 * i;
        printf("GPU %d: Simulated GPU (UUID: GPU-", n++);
        for (int k = 0; k < 16; k++) printf("%s%02x", (k == 4 || k == 6 || k == 8 || k == 10) ? "-" : "", e[k]);
        /* version 3: a burst limit at +48 is the total a burstable slice shows */
        uint64_t limit = version == 3 ? le(e + 48, 8) : 0;
        if (limit > le(e + 24, 8))
          printf(") %llu MiB, the container's burst limit over a guarantee of %llu MiB (fake nvidia-smi from tests/fake)\n",
                 (unsigned long long)(limit >> 20), (unsigned long long)(le(e + 24, 8) >> 20));
        else
          printf(") %llu MiB, the container's slice (fake nvidia-smi from tests/fake)\n",
                 (unsigned long long)(le(e + 24, 8) >> 20));
      }
    }
  }
  if (n == 0) puts("GPU 0: Simulated GPU (fake nvidia-smi from tests/fake; no gpu-quota slice here)");
  return 0;
}
