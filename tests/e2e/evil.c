/* Marker library: if any privileged gpu-quota process ever loads it (through
 * an LD_PRELOAD taken from the image), the marker file appears. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
  const char *m = getenv("EVIL_MARKER");
  int fd = open(m ? m : "/tmp/gpu-quota-evil-loaded", O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) { (void)write(fd, "loaded\n", 7); close(fd); }
}
