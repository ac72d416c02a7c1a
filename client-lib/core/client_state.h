// What the client library keeps about the app's driver state, so that many calls need no round
// trip: each thread's context stack, the contexts and primary contexts, device allocations
// (device vs host pointers), pinned host memory (client-local), kernel parameter layouts.
//
// Thread-safety: all functions are safe from any thread. The context stack is per thread, as
// in CUDA; the tables are process-wide behind one mutex each.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/wire_formats.h"

namespace cuwire::client {

// ---- contexts
struct ContextInfo {
  CUdevice device = 0;
  unsigned flags = 0;
  bool primary = false;
  uint64_t green = 0;  // the green context it is the CUcontext of (cuCtxFromGreenCtx); 0: none
};
// The context a handle names; false for a handle this process was never given.
bool context_info(uint64_t ctx_id, ContextInfo* out);
// The current context's device; CUDA_ERROR_INVALID_CONTEXT without one.
CUresult current_device(CUdevice* dev);
// The id of device `dev`'s primary context, created on the server if need be (not retained).
CUresult primary_context(CUdevice dev, uint64_t* ctx_id);
// Green contexts (green_contexts.cc): each has a context of its own on the server.
void add_green_context(uint64_t green_id, uint64_t ctx_id, CUdevice dev);
// The context of a green context this process made; false for any other handle.
bool green_context(uint64_t green_id, uint64_t* ctx_id);
// Forgets a destroyed green context and its context (off this thread's stack too).
void remove_green_context(uint64_t green_id);

// ---- memory
// True when p lies in a device allocation of this process: *base and *size describe it.
bool find_device_allocation(uint64_t p, uint64_t* base, size_t* size);
bool is_device_pointer(uint64_t p);
// True when p lies in pinned host memory from cuMemHostAlloc / cuMemHostRegister.
bool find_pinned(const void* p, void** base, size_t* size, unsigned* flags);
// True when [p, p + n) lies in one block of pinned host memory this library allocated
// (cuMemHostAlloc): mapped read-write for as long as the app keeps it, so a copy need not ask
// the kernel about its pages (client-lib/core/host_access.h).
bool in_library_host_memory(const void* p, size_t n);
// A launch's packed parameters: every 8-byte word that points into pinned memory not yet
// tracked starts its tracking, so the kernel finds the block's current bytes (client_state.cc).
void adopt_pinned_pointers(const uint8_t* data, size_t n);
// True when [p, p + n) lies in one pinned block backed on the device, which is then tracked
// (kept coherent from now on) so that the device may use those bytes at the same address.
bool pinned_device_range(const void* p, size_t n);

// ---- kernels
// The parameter layout of a CUfunction or CUkernel, fetched once per handle.
CUresult param_layout(uint64_t func_id, const std::vector<formats::ParamSlot>** out);

// Limits launches are checked against on the client (cached device attributes).
struct LaunchLimits {
  int max_threads_per_block = 0;
  int max_block[3] = {};
  int max_grid[3] = {};
  int max_shared_optin = 0;
  int max_shared_default = 0;  // dynamic shared memory a function has without opting in
};
CUresult launch_limits(CUdevice dev, LaunchLimits* out);

// ---- starting over with a new connection (cuwire_client_reset, local.cc)
// Each forgets what this process knew of the server's objects: handle ids and device addresses
// of a new session may be those of the old one. Calls of other threads must not be under way.
void reset_client_state();       // contexts, device allocations, layouts, mapped pinned memory
void reset_capture_state();      // client-lib/calls/graphs_capture.cc
void reset_device_attributes();  // client-lib/calls/devices.cc

}  // namespace cuwire::client
