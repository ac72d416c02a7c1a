#include "server/worker/shared_block.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace cuwire::server {

namespace {

Status failed(const char* name, const char* what, int error) {
  return Status::failed(std::string(name) + ": " + what + ": " + std::strerror(error));
}

}  // namespace

Status create_shared_block(const char* name, size_t bytes, SharedBlock* out) {
  *out = SharedBlock{};
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return failed(name, "memfd_create", errno);
  // Sparse: a page is taken when first written.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    return failed(name, "sizing", e);
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    return failed(name, "sealing", e);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return failed(name, "mmap", e);
  }
  *out = SharedBlock{fd, base, bytes};
  return Status::ok();
}

Status attach_shared_block(int fd, size_t min_bytes, size_t max_bytes, SharedBlock* out) {
  *out = SharedBlock{};
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 0 ||
      static_cast<size_t>(st.st_size) < min_bytes || static_cast<size_t>(st.st_size) > max_bytes) {
    if (fd >= 0) close(fd);
    return Status::invalid_argument("a shared block's descriptor is not one of this build");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return failed("shared block", "mmap", e);
  }
  *out = SharedBlock{fd, base, bytes};
  return Status::ok();
}

void release_shared_block(SharedBlock* block) {
  if (block->base) munmap(block->base, block->bytes);
  if (block->fd >= 0) close(block->fd);
  *block = SharedBlock{};
}

}  // namespace cuwire::server
