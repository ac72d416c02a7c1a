#include "tests/roundtrip/recording_backend.h"

#include <cstring>

#include "server/session/bulk_extent.h"

namespace cuwire::roundtrip {

void fill_pattern(void* p, size_t n, uint64_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  uint64_t word = 0;
  for (size_t k = 0; k < n; ++k) {
    if (k % 8 == 0) word = mix(seed + k);
    uint8_t v = static_cast<uint8_t>(word >> (8 * (k % 8)));
    b[k] = v == 0 || v == kClientFill ? 0xA5 : v;
  }
}

void RecordingBackend::arm(CallId id, CUresult rc) {
  std::lock_guard lock(mu_);
  log_.clear();
  armed_id_ = static_cast<uint32_t>(id);
  armed_rc_ = rc;
}

void RecordingBackend::disarm() {
  std::lock_guard lock(mu_);
  armed_id_ = 0;
  armed_rc_ = CUDA_SUCCESS;
}

void RecordingBackend::clear() {
  std::lock_guard lock(mu_);
  log_.clear();
}

std::vector<CallRecord> RecordingBackend::take(CallId id) {
  std::lock_guard lock(mu_);
  std::vector<CallRecord> out;
  for (auto& r : log_) {
    if (r.id == static_cast<uint32_t>(id)) out.push_back(r);
  }
  return out;
}

void* RecordingBackend::fake_handle() {
  // Far from any real address and 64-byte spaced, so no two calls ever hand out the same one.
  return reinterpret_cast<void*>(uintptr_t{0x00006a0000000000} + ++handles_ * 0x40);
}

CUdeviceptr RecordingBackend::fake_allocation() {
  // 4 GiB apart: the sizes the tests ask for never make two allocations overlap.
  return CUdeviceptr{0x00007d0000000000} + (++allocations_ << 32);
}

CUresult RecordingBackend::cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params,
                                          unsigned int flags, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = static_cast<CUcontext>(fake_handle());
  current_ = *pctx;
  return CUDA_SUCCESS;
}

CUresult RecordingBackend::cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = current_;
  return CUDA_SUCCESS;
}

CUresult RecordingBackend::cuCtxSetCurrent(CUcontext ctx) {
  current_ = ctx;
  return CUDA_SUCCESS;
}

CUresult RecordingBackend::cuLibraryLoadData(CUlibrary* library, const void* code,
                                             CUjit_option* jitOptions, void** jitOptionsValues,
                                             unsigned int numJitOptions,
                                             CUlibraryOption* libraryOptions,
                                             void** libraryOptionValues,
                                             unsigned int numLibraryOptions) {
  if (!library) return CUDA_ERROR_INVALID_VALUE;
  *library = static_cast<CUlibrary>(fake_handle());
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Recorder

RecordingBackend::Recorder::Recorder(RecordingBackend& backend, CallId id, size_t params)
    : backend_(backend), seed_(mix(++backend.calls_ * 0x10001)) {
  rec_.id = static_cast<uint32_t>(id);
  rec_.in.resize(params);
  rec_.out.resize(params);
}

void RecordingBackend::Recorder::in(size_t i, const void* p, size_t n) {
  rec_.in[i].present = p != nullptr;
  if (p && n)
    rec_.in[i].bytes.assign(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
}

void RecordingBackend::Recorder::string(size_t i, const char* s) {
  rec_.in[i].present = s != nullptr;
  if (s) in(i, s, std::strlen(s) + 1);
}

void RecordingBackend::Recorder::image(size_t i, const void* p) {
  size_t n = 0;
  rec_.in[i].present = p != nullptr;
  if (p && server::bulk_extent(p, &n)) in(i, p, n);
}

void RecordingBackend::Recorder::out_bytes(size_t i, void* p, size_t n) {
  if (!p) return;
  fill_pattern(p, n, seed_ + i);
  keep_out(i, p, n);
}

void RecordingBackend::Recorder::out_allocation(size_t i, CUdeviceptr* p) {
  if (!p) return;
  *p = backend_.fake_allocation();
  keep_out(i, p, sizeof *p);
}

void RecordingBackend::Recorder::keep_out(size_t i, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  rec_.out[i].bytes.assign(b, b + n);
}

CUresult RecordingBackend::Recorder::done() {
  std::lock_guard lock(backend_.mu_);
  rec_.result = rec_.id == backend_.armed_id_ ? backend_.armed_rc_ : CUDA_SUCCESS;
  backend_.log_.push_back(rec_);
  return rec_.result;
}

}  // namespace cuwire::roundtrip
