#include "protocol/sealed_fd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cuwire {

int make_sealed_fd(const char* name, const void* bytes, size_t n, bool inheritable) {
  const int fd = memfd_create(name, (inheritable ? 0u : unsigned{MFD_CLOEXEC}) | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (pwrite(fd, bytes, n, 0) != static_cast<ssize_t>(n) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool read_sealed_fd(int fd, void* bytes, size_t n) {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(n) &&
         pread(fd, bytes, n, 0) == static_cast<ssize_t>(n);
}

}  // namespace cuwire
