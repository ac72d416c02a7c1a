#include "client-lib/core/host_access.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>

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

// The PROCMAP_QUERY ioctl of /proc/PID/maps (Linux 6.11), as the kernel's UAPI (linux/fs.h)
// defines it; older C library headers lack it.
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kVmaReadable = 0x01;
constexpr uint64_t kVmaWritable = 0x02;
constexpr uint64_t kVmaShared = 0x08;

// Ranges from this size on ask about their mappings first.
constexpr size_t kMappingQueryMin = 256 << 10;
// A range crossing more mappings than this is left to the page probe.
constexpr int kMappingQueryMaxMappings = 16;

// This process's /proc/self/maps, opened on first use; a child after fork(2) opens its own (the
// inherited one describes the parent). -1 once the kernel refused the query.
class MapsFile {
 public:
  // The descriptor, or -1 when there is none to ask.
  int get() {
    std::lock_guard lock(mu_);
    if (unsupported_) return -1;
    const pid_t pid = getpid();
    if (fd_ >= 0 && pid_ == pid) return fd_;
    if (fd_ >= 0) close(fd_);
    fd_ = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    pid_ = pid;
    return fd_;
  }
  // The kernel does not know the query: never ask again.
  void unsupported() {
    std::lock_guard lock(mu_);
    unsupported_ = true;
  }

 private:
  std::mutex mu_;
  int fd_ = -1;
  pid_t pid_ = 0;
  bool unsupported_ = false;
};

MapsFile& maps_file() {
  static MapsFile* m = new MapsFile();  // leaked: copies may run during static destruction
  return *m;
}

// True when [a, end) lies wholly in private anonymous mappings that have `access`. False
// means "ask the page probe", not "bad".
bool anonymous_mappings_cover(uintptr_t a, uintptr_t end, HostAccess access) {
  const int fd = maps_file().get();
  if (fd < 0) return false;
  const uint64_t need =
      access == HostAccess::kReadWrite ? kVmaReadable | kVmaWritable : kVmaReadable;
  uintptr_t at = a;
  for (int i = 0; i < kMappingQueryMaxMappings && at < end; ++i) {
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_addr = at;
    if (ioctl(fd, kProcmapQuery, &q) != 0) {
      if (errno == ENOTTY || errno == EINVAL || errno == EOPNOTSUPP) maps_file().unsupported();
      return false;  // ENOENT: no mapping covers `at`
    }
    if (q.vma_start > at || q.vma_end <= at) return false;
    if ((q.vma_flags & need) != need || (q.vma_flags & kVmaShared) != 0) return false;
    if (q.inode != 0 || q.dev_major != 0 || q.dev_minor != 0) return false;  // file-backed
    at = static_cast<uintptr_t>(q.vma_end);
  }
  return at >= end;
}

}  // namespace

bool mapping_query_supported() {
  static const bool supported = [] {
    static int probe = 0;
    const uintptr_t a = reinterpret_cast<uintptr_t>(&probe);
    const int fd = maps_file().get();
    if (fd < 0) return false;
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_addr = a;
    return ioctl(fd, kProcmapQuery, &q) == 0;
  }();
  return supported;
}

void HostPageProbe::add(const void* p, size_t n) {
  if (n == 0 || !ok_) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uintptr_t end;
  if (!p || __builtin_add_overflow(a, n, &end)) {
    ok_ = false;
    return;
  }
  if (n >= kMappingQueryMin && !vm_readv_only_ && !pages_only_ &&
      anonymous_mappings_cover(a, end, access_)) {
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
  ++pages_probed_;
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
