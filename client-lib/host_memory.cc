#include "host_memory.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

namespace cuwire::client {
namespace {

uintptr_t page_size() {
  static const uintptr_t size = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<uintptr_t>(p) : uintptr_t{4096};
  }();
  return size;
}

}  // namespace

void HostPageProbe::add(const void* p, size_t n) {
  if (n == 0 || !ok_) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uintptr_t end;
  if (!p || __builtin_add_overflow(a, n, &end)) {
    ok_ = false;
    return;
  }
  const uintptr_t mask = page_size() - 1;
  add_page_byte(a);
  for (uintptr_t page = (a & ~mask) + page_size(); page < end && page != 0 && ok_;
       page += page_size()) {
    add_page_byte(page);
  }
}

bool HostPageProbe::ok() {
  flush();
  return ok_;
}

void HostPageProbe::add_page_byte(uintptr_t a) {
  const uintptr_t page = a & ~(page_size() - 1);
  if (page == last_page_) return;
  last_page_ = page;
  pages_[n_++] = iovec{reinterpret_cast<void*>(a), 1};
  if (n_ == kBatch) flush();
}

void HostPageProbe::flush() {
  if (n_ == 0 || !ok_) {
    n_ = 0;
    return;
  }
  bool good = false;
  if (!pipe_only_) {
    // Reading: the pages' bytes into scratch. Writing: each byte onto itself, which the kernel
    // does as a read of the page and a write to it.
    iovec scratch{scratch_, n_};
    const bool write = access_ == HostAccess::kReadWrite;
    ssize_t r = process_vm_readv(getpid(), write ? pages_ : &scratch, write ? n_ : 1, pages_, n_, 0);
    good = r == static_cast<ssize_t>(n_);
  }
  // Failed (or unavailable): the final word is the pipe's, whose copies are the socket's own.
  if (!good) good = flush_with_pipe();
  ok_ = good;
  n_ = 0;
}

bool HostPageProbe::flush_with_pipe() {
  int fd[2];
  // Without a descriptor to spare nothing can be checked; the send then behaves as before.
  if (pipe2(fd, O_CLOEXEC) != 0) return true;
  // The pipe holds 64 KiB, a batch at most 1024 bytes: neither call blocks.
  bool good = writev(fd[1], pages_, static_cast<int>(n_)) == static_cast<ssize_t>(n_);
  if (good && access_ == HostAccess::kReadWrite) {
    good = readv(fd[0], pages_, static_cast<int>(n_)) == static_cast<ssize_t>(n_);
  }
  close(fd[0]);
  close(fd[1]);
  return good;
}

bool host_range_ok(const void* p, size_t n, HostAccess access) {
  HostPageProbe probe(access);
  probe.add(p, n);
  return probe.ok();
}

}  // namespace cuwire::client
