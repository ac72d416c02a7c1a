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
// How: one byte of every page of every range, batched, with process_vm_readv(2) on this
// process (one system call per 1024 pages; no data is moved but those bytes). For writes each
// probed byte is copied onto itself, so the kernel checks that the page is writable; a
// destination is about to be overwritten anyway, and only bytes inside the range are touched.
// Where that call is unavailable (seccomp) or refuses a mapping that user code can still access
// (VM_PFNMAP device mappings), a pipe gives the answer: the same kernel copy routines the
// socket uses.
//
// Limits: a range another thread unmaps between the check and the send still breaks the
// connection (the app raced against its own copy).
//
// Thread-safety: HostPageProbe lives on the calling thread's stack; no shared state.
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

  // Tests: check with the pipe alone, as where process_vm_readv is unavailable.
  void force_pipe_for_testing() { pipe_only_ = true; }

 private:
  static constexpr size_t kBatch = 1024;  // IOV_MAX
  void add_page_byte(uintptr_t a);
  void flush();
  bool flush_with_pipe();

  HostAccess access_;
  bool ok_ = true;
  bool pipe_only_ = false;
  uintptr_t last_page_ = UINTPTR_MAX;  // the page of the last byte queued (ranges may share one)
  size_t n_ = 0;
  iovec pages_[kBatch];
  uint8_t scratch_[kBatch];
};

// One range in one call: true when all of [p, p + n) has `access`.
bool host_range_ok(const void* p, size_t n, HostAccess access);

}  // namespace cuwire::client
