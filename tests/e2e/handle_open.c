/* Probe for tests/e2e/untrusted_host_state.rs: reopen FILE through the
 * mount of MOUNT_FILE by its file handle, for writing, and write to it.
 * usage: handle-open FILE MOUNT_FILE; exit 0 only if the write went in. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  struct file_handle *fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
  int mount_id;
  fh->handle_bytes = MAX_HANDLE_SZ;
  if (name_to_handle_at(AT_FDCWD, argv[1], fh, &mount_id, 0)) {
    printf("name_to_handle_at %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  int m = open(argv[2], O_RDONLY);
  if (m < 0) {
    printf("open %s: %s\n", argv[2], strerror(errno));
    return 1;
  }
  int f = open_by_handle_at(m, fh, O_WRONLY);
  if (f < 0) {
    printf("open_by_handle_at %s through %s: %s\n", argv[1], argv[2], strerror(errno));
    return 1;
  }
  /* past anything real in either file: 1 byte at 1 MiB */
  ssize_t n = pwrite(f, "x", 1, 1 << 20);
  printf("open_by_handle_at %s through %s: writable (write %zd)\n", argv[1], argv[2], n);
  return n == 1 ? 0 : 1;
}
