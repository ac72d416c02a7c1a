#include "host_memory.h"

#include <errno.h>
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

// The calling thread's probe pipe, non-blocking, empty between batches. A child after fork(2)
// makes its own: the inherited one is shared with the parent.
class ThreadPipe {
 public:
  ~ThreadPipe() { close_fds(); }

  // The pipe, or nullptr when none can be made (out of descriptors).
  int* get() {
    if (fd_[0] >= 0 && pid_ == getpid()) return fd_;
    close_fds();
    if (pipe2(fd_, O_CLOEXEC | O_NONBLOCK) != 0) {
      fd_[0] = fd_[1] = -1;
      return nullptr;
    }
    pid_ = getpid();
    return fd_;
  }

  // After a batch that left bytes behind: empties the pipe, or drops it if that fails.
  void drain(uint8_t* scratch, size_t size) {
    for (;;) {
      ssize_t r = read(fd_[0], scratch, size);
      if (r > 0) continue;
      if (r < 0 && errno == EAGAIN) return;  // empty
      close_fds();
      return;
    }
  }

 private:
  void close_fds() {
    if (fd_[0] >= 0) {
      close(fd_[0]);
      close(fd_[1]);
    }
    fd_[0] = fd_[1] = -1;
  }

  int fd_[2] = {-1, -1};
  pid_t pid_ = 0;
};

thread_local ThreadPipe t_pipe;

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
  if (n_ > 0 && ok_) {
    int* fd = vm_readv_only_ ? nullptr : t_pipe.get();
    ok_ = fd ? flush_with_pipe(fd) : flush_with_vm_readv();
  }
  n_ = 0;
}

bool HostPageProbe::flush_with_pipe(int fd[2]) {
  // The pipe holds 64 KiB, a batch 1024 bytes: the write never blocks (non-blocking anyway).
  const ssize_t want = static_cast<ssize_t>(n_);
  bool good = writev(fd[1], pages_, static_cast<int>(n_)) == want;
  if (good) {
    good = access_ == HostAccess::kReadWrite ? readv(fd[0], pages_, static_cast<int>(n_)) == want
                                             : read(fd[0], scratch_, n_) == want;
  }
  if (!good) t_pipe.drain(scratch_, sizeof scratch_);  // a failed batch leaves bytes behind
  return good;
}

bool HostPageProbe::flush_with_vm_readv() {
  // Reading: the pages' bytes into scratch. Writing: each byte onto itself, which the kernel
  // does as a read of the page and a write to it.
  iovec scratch{scratch_, n_};
  const bool write = access_ == HostAccess::kReadWrite;
  ssize_t r = process_vm_readv(getpid(), write ? pages_ : &scratch, write ? n_ : 1, pages_, n_, 0);
  if (r < 0 && (errno == ENOSYS || errno == EPERM)) return true;  // cannot tell: as before
  return r == static_cast<ssize_t>(n_);
}

bool host_range_ok(const void* p, size_t n, HostAccess access) {
  HostPageProbe probe(access);
  probe.add(p, n);
  return probe.ok();
}

}  // namespace cuwire::client
