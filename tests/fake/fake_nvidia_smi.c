/* A static stand-in for nvidia-smi on hosts without a GPU (tests, demo):
 * an ELF program, as the hook only injects real executables, never scripts. */
#include <stdio.h>
int main(void) {
  puts("GPU 0: Simulated GPU (fake nvidia-smi from tests/fake)");
  return 0;
}
