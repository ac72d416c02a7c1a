// Managed (unified) memory for a remote GPU: cuMemAllocManaged gives the app one pointer that
// is valid on the device (a real allocation on the server) and on the host (an anonymous host
// mirror mapped at exactly that address in this process).
//
// Coherence is kept at synchronisation points, as on pre-Pascal GPUs (no concurrent access):
//   - Host writes are tracked per page: a mirror is write-protected after every push and pull;
//     the first write to a page faults, the SIGSEGV handler marks the page dirty and unprotects
//     it. Faults outside managed mirrors go to the handler that was installed before ours.
//   - Before any call goes to the server (launches, copies, memsets, synchronisations ...),
//     dirty pages are pushed to the device (a synchronous host-to-device copy per run).
//   - After a synchronising call succeeds (call_is_sync: cuCtxSynchronize, stream and event
//     synchronisation, successful queries, synchronous copies and memsets), every page that is
//     not dirty on the host is pulled from the device, if a call that may write device memory
//     went out since the last full pull. Dirty pages are never pulled over: a host write not
//     yet pushed wins.
//   - Host buffers of a call's reply (a device-to-host copy into a managed pointer used as
//     host memory) count as host writes: those pages are marked dirty before the call.
//   - Zero-copy memory (pinned and registered memory kernels use: adopt, track_registered) is
//     kept at byte grain, since kernels may write a page while the host writes other bytes of
//     it (a flag a running kernel polls): a page's first write copies it to a twin, a push sends
//     the bytes that differ from the twin, and a pull merges the device's changes into a page
//     the host wrote, keeping the host's. Its copies go on a non-blocking stream of their own,
//     never waiting for the legacy stream, where a kernel may be polling for the very write.
//
// Limits (documented, not bugs to chase):
//   - Host access to managed memory concurrent with a synchronising call or launch of another
//     thread is not tracked reliably (pre-Pascal GPUs forbid it too). The client reports
//     CONCURRENT_MANAGED_ACCESS = 0 to the app for this reason, whatever the server's device
//     can do (client-lib/calls/devices.cc).
//   - System calls that write into a mirror page that is still protected (read(2) into managed
//     memory) fail with EFAULT instead of faulting; touch the pages first.
//   - A pull makes the clean pages it fills writable for the moment it copies into them; an app
//     thread writing such a page then is not seen. Pulls run after the app's synchronising
//     calls and, on the host-call thread, before a host function (take_device_bytes): host
//     writes concurrent with either are the concurrent access above.
//   - One thread's push waits for another's under way only when it dirtied a page itself since
//     its last push (a write to a page another thread had dirtied already does not fault, so
//     it does not count).
//   - `__managed__` variables (cuLibraryGetManaged) get a mirror over the pages that hold them,
//     transfers clipped to the variable; one that shares a host page with another managed
//     range (not on the sim, which gives each its own pages) is refused with OUT_OF_MEMORY.
//   - Server allocators that place allocations at less than page alignment (the sim: 256
//     bytes) get a padding allocation so that the managed one starts on a page; sizes are
//     rounded up to whole pages on the server (cuMemGetInfo shows the rounded size).
//
// Thread-safety: all functions are safe from any thread. The table is guarded by one mutex;
// the signal handler reads it lock-free through atomics only (async-signal-safe).
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "client-lib/core/client_call.h"

namespace cuwire::client::managed {

// ---- hooks for every call the client sends (connection.cc)

// Pushes dirty pages, then marks the call's host reply buffers inside mirrors as written.
// Returns the error of a failed push (the app's call is then not sent).
CUresult before_call(const ArgWriter& w);
// After a successful synchronising call: pulls what the device may have written. Returns rc,
// or the pull's error when rc was CUDA_SUCCESS.
CUresult after_call(uint32_t call_id, CUresult rc);

// Whether any host mirror is tracked (managed memory, pinned memory kernels use): the host's
// view of device memory then lags the device's until a synchronisation, and host writes reach
// the device with the next call.
bool tracking();

// ---- host functions (host_calls.cc): a host function sees the device's bytes of managed
// memory as they are when its stream reaches it, and its writes reach the device before the
// stream's later work (server/calls/host_calls.h).

struct MirrorRange {
  uint64_t device = 0;
  uint64_t bytes = 0;
};
// The device ranges behind every tracked mirror (clipped to registrations and variables).
std::vector<MirrorRange> mirror_ranges();
// Whether device work may have written managed memory since the last full pull.
bool device_may_be_ahead();
// On the host-call thread before the function: the server's runs of device bytes
// (memory_runs.h) go into the mirror pages that are not dirty. Runs outside mirrors are
// ignored. From here until give_host_writes the function's views (`ranges`) are held: no other
// thread's push sends their dirty pages, which reach the device with the function's answer,
// before the stream's later work (a push of its own would race that work).
void take_device_bytes(std::span<const uint8_t> runs, const std::vector<MirrorRange>& ranges);
// On the host-call thread after the function: the dirty pages inside `ranges`, as runs
// appended to *runs; they are clean (and protected) again. Dirty pages elsewhere stay dirty.
// The views are no longer held.
void give_host_writes(const std::vector<MirrorRange>& ranges, std::vector<uint8_t>* runs);

// ---- the table of managed ranges

// True when p lies in a managed allocation: [*base, *base + *size) as the app asked for it.
bool find(uint64_t p, uint64_t* base, size_t* size);
// The server freed the allocation at base (client_state.cc note_free): unmaps its mirror.
void forget(uint64_t base);
// The context's memory is gone (primary context reset): unmaps every mirror.
void forget_all();

// ---- advice and prefetches (client-lib/calls/managed_memory_advice.cc): recorded per page for
// cuMemRangeGetAttribute

// A location cuMemAdvise or cuMemPrefetchAsync may name: a device of the session, or the host.
bool valid_location(const CUmemLocation& l);
void advise(uint64_t p, uint64_t n, CUmem_advise advice, CUmemLocation where);
void prefetched(uint64_t p, uint64_t n, CUmemLocation where);
// The allocation [base, base + n) is gone (forget), or all managed memory (forget_all).
void forget_advice(uint64_t base, uint64_t n);
void forget_all_advice();
// One attribute of the managed range [p, p + n) as CUDA answers it.
CUresult range_attribute(void* data, size_t size, CUmem_range_attribute attribute, uint64_t p,
                         uint64_t n);

// A __managed__ variable [p, p + n) of `library`: maps a host mirror over the pages holding it,
// filled from the device, tracked as managed memory with transfers clipped to the variable.
// Success when the variable already has one.
CUresult mirror_variable(uint64_t p, size_t n, CUlibrary library);

// Pinned host memory kernels can reach at its host address: a managed allocation of `bytes`
// on the server with plain, untracked read-write memory at the same address here (adopt()
// starts tracking it). *span is the mapped size, a whole number of pages.
CUresult alloc_backed(size_t bytes, CUdeviceptr* out, size_t* span);

// Device memory of `bytes` behind registered host memory (track_registered): a managed
// allocation on the server, so that the server can address it on every backend (host
// functions read and write it there, server/calls/host_calls.h).
CUresult alloc_device_copy(size_t bytes, CUdeviceptr* out);

// ---- the page tracker itself, apart from the wire (used by the hooks and by tests)

// Maps a write-protected anonymous mirror of `bytes` (a whole number of pages) at exactly
// `addr` (page aligned) and tracks it; false (errno set) when the address range is taken.
bool map_mirror(uint64_t addr, size_t bytes, size_t app_bytes);
// Maps plain read-write memory of `bytes` (a whole number of pages) at exactly `addr`, not
// tracked: pinned host memory with a managed allocation behind it, until adopt().
bool map_untracked(uint64_t addr, size_t bytes);
// Starts tracking the app's registered memory [p, p + n) (cuMemHostRegister) whose device copy
// is `device` (a managed allocation of n bytes), as zero-copy memory: every page is dirty, the
// pages containing the range are write-protected (writes to the rest of them fault and are
// pushed harmlessly), and pulls write only inside the range. forget(first page) stops it
// without unmapping.
bool track_registered(uintptr_t p, size_t n, uint64_t device);
// Starts tracking a range map_untracked mapped, as zero-copy memory, every page dirty (the
// device copy is stale): the next call pushes all of it. True when it is tracked (also when it
// already was).
bool adopt(uint64_t addr, size_t bytes, size_t app_bytes);
// Moves the data of dirty pages with `send(addr, n)` (contiguous runs), protecting them first.
// `send(host, device, n)`: the device copy of host bytes [host, host + n) is at device; a send
// that returns CUDA_ERROR_NOT_READY leaves its pages dirty for a later push. `wanted(device,
// n)`, when given, picks the runs to move; the others stay dirty and writable. When this thread
// wrote managed memory since its last push, returns only once every push under way has ended
// too (one may be sending those writes).
CUresult push_dirty(const std::function<CUresult(uint64_t, uint64_t, size_t)>& send,
                    const std::function<bool(uint64_t, size_t)>& wanted = {});
// Refreshes every page that is not dirty with `fetch(addr, n)` (contiguous runs).
// `bounded`: waits for the table at most a moment (a host function's thread, which must not
// wait for a push or pull of another thread that waits for its stream); CUDA_ERROR_NOT_READY
// when it did not get it, nothing moved.
CUresult pull_clean(const std::function<CUresult(uint64_t, uint64_t, size_t)>& fetch,
                    bool bounded = false);
// Number of dirty pages over all mirrors (tests, statistics).
size_t dirty_pages();
// How long a bounded wait for the table lasts (500 ms; tests make it longer).
void set_bounded_wait(std::chrono::milliseconds wait);

}  // namespace cuwire::client::managed
