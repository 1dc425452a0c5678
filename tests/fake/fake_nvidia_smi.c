/* A static stand-in for nvidia-smi on hosts without a GPU (tests, demo):
 * an ELF program, as the hook only injects real executables, never scripts.
 * Static, so the interceptor cannot reach it: it reads the container's slice
 * from /run/gpu-quota/limits (the file the interceptor reads) and prints,
 * per GPU of the slice, what nvidia-smi shows there through NVML. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

int main(void) {
  FILE *f = fopen("/run/gpu-quota/limits", "r");
  char line[512];
  int n = 0;
  if (f) {
    while (fgets(line, sizeof line, f)) {
      /* gpu.GPU-<uuid>.vram_bytes=N */
      char *dot, *eq;
      if (strncmp(line, "gpu.", 4) != 0 || !(eq = strchr(line, '='))) continue;
      *eq = 0;
      dot = strrchr(line, '.');
      if (!dot || strcmp(dot, ".vram_bytes") != 0) continue;
      *dot = 0;
      unsigned long long b = strtoull(eq + 1, NULL, 10);
      printf("GPU %d: Simulated GPU (UUID: %s) %llu MiB, the container's slice (fake nvidia-smi from tests/fake)\n",
             n++, line + 4, b >> 20);
    }
    fclose(f);
  }
  if (n == 0) puts("GPU 0: Simulated GPU (fake nvidia-smi from tests/fake; no gpu-quota slice here)");
  return 0;
}
