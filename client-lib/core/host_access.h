// Whether the app's host buffers can be read (copy sources) or written (copy destinations),
// asked of the kernel before any byte of a call goes on the wire or into a staging buffer.
//
// Why: the socket reads a source buffer and writes a destination buffer inside the kernel, so
// an app's bad host pointer (NULL, unmapped, a buffer that runs into a guard page, read-only
// memory as a destination) shows up as EFAULT in the middle of a frame, after part of it went
// out, and the stream to the server cannot be resynchronised. Checked first, the bad pointer
// fails its own call with CUDA_ERROR_INVALID_VALUE, as the driver reports it, and the
// connection stays up.
//
// How: one byte of every page of every range goes through a pipe, batched: writev(2) of the
// pages' bytes into it (the kernel reads each page, as the socket's write would), then, for a
// destination, readv(2) of them back onto themselves (the kernel writes each page, as the
// socket's read would), else one read(2) to empty the pipe. Two system calls per 1024 pages;
// a destination is about to be overwritten anyway, and only bytes inside the range are
// touched. The same kernel copy routines as the socket's, so a mapping the socket can use
// passes (unlike get_user_pages, which refuses VM_PFNMAP device mappings). Measured on the
// 2-core development machine: under 1 us for a buffer of a page or less, about 16 us (source)
// and 28 us (destination) per MiB, against some 600 us per MiB for the copy itself through the
// library; process_vm_readv(2) on this process, the other known trick, costs about 100 us per
// MiB, more than a memcpy of it. Each thread keeps its own pipe (two descriptors).
// Without a descriptor to spare, process_vm_readv answers; where that is refused too
// (seccomp), the check passes and the copy behaves as without it.
//
// Large ranges first ask the kernel about their mappings (PROCMAP_QUERY on /proc/self/maps,
// Linux 6.11 on; one ioctl per mapping the range crosses): a range of 256 KiB or more that
// lies wholly in private anonymous mappings with the access asked for passes without the
// per-page probe, which would cost a 64 MiB copy about 1-2 ms, a tenth of its time on the
// socket. Anything else (file-backed or shared memory, a hole, a mapping without the access,
// an older kernel) goes through the page probe, which decides. What only the page tables know
// is missed there: a guard region installed with MADV_GUARD_INSTALL inside an anonymous
// mapping passes, and a copy through it breaks the connection as an unchecked one would.
//
// Limits (the app racing its own copy, in both cases): a range another thread unmaps between
// the check and the send still breaks the connection; a destination byte another thread
// writes between the probe's writev and readv gets its old value back.
//
// Thread-safety: HostPageProbe lives on the calling thread's stack; the pipe it uses is the
// calling thread's own.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace cuwire::client {

enum class HostAccess { kRead, kReadWrite };

class HostPageProbe {
 public:
  explicit HostPageProbe(HostAccess access) : access_(access) {}
  HostPageProbe(const HostPageProbe&) = delete;
  HostPageProbe& operator=(const HostPageProbe&) = delete;

  // Adds [p, p + n) to the ranges checked. NULL with n > 0 fails the probe; n == 0 is nothing.
  void add(const void* p, size_t n);
  // True when every page of every range added has the access asked for.
  bool ok();

  // Tests: check with process_vm_readv, as where no pipe can be made (no mapping query).
  void use_vm_readv_for_testing() { vm_readv_only_ = true; }
  // Tests: check page by page, as where the kernel cannot be asked about mappings.
  void use_pages_only_for_testing() { pages_only_ = true; }
  // Tests: how many pages went through the page probe.
  size_t pages_probed() const { return pages_probed_; }

 private:
  static constexpr size_t kBatch = 1024;  // IOV_MAX
  void add_page_byte(uintptr_t a);
  void flush();
  bool flush_with_pipe(int fd[2]);
  bool flush_with_vm_readv();

  HostAccess access_;
  bool ok_ = true;
  bool vm_readv_only_ = false;
  bool pages_only_ = false;
  size_t pages_probed_ = 0;
  uintptr_t last_page_ = UINTPTR_MAX;  // the page of the last byte queued (ranges may share one)
  size_t n_ = 0;
  iovec pages_[kBatch];
  uint8_t scratch_[kBatch];
};

// One range in one call: true when all of [p, p + n) has `access`.
bool host_range_ok(const void* p, size_t n, HostAccess access);

// Whether this kernel answers PROCMAP_QUERY (tests).
bool mapping_query_supported();

}  // namespace cuwire::client
