// RecordingBackend: a Backend that runs nothing. It keeps the bytes of every argument a call
// brings, writes a known pattern into every output (fake but distinct handles and device
// addresses where the session keeps track of them), and answers the result a test armed.
//
// The generated subclass (roundtrip_test.cc) overrides every call the round-trip tests cover;
// this base answers the calls a session makes on its own behalf (context creation and
// switching, library loading).
//
// Thread-safety: the session's thread calls the Backend side, the test's thread the rest; one
// mutex guards the log and the armed result.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/handle_kind.h"
#include "server/backend/backend.h"

namespace cuwire::roundtrip {

// Bytes a pattern never contains: a caller fills its out buffers with it to see whether they
// were written.
inline constexpr uint8_t kClientFill = 0xEE;

// splitmix64: cheap, well mixed, deterministic.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// n bytes derived from seed, none of them 0 or kClientFill.
void fill_pattern(void* p, size_t n, uint64_t seed);

// One parameter as the backend saw it: a null pointer, or the bytes it carried (scalars: the
// value; in-arrays, strings and images: what they point at; out pointers: nothing).
struct ArgRecord {
  bool present = true;
  std::vector<uint8_t> bytes;
  bool operator==(const ArgRecord&) const = default;
};

struct CallRecord {
  uint32_t id = 0;
  std::vector<ArgRecord> in;   // per parameter, in signature order
  std::vector<ArgRecord> out;  // per parameter: the bytes this backend wrote there (if any)
  CUresult result = CUDA_SUCCESS;
};

class RecordingBackend : public server::Backend {
 public:
  // Calls of `id` answer `rc` until disarm(); every other call answers CUDA_SUCCESS.
  void arm(CallId id, CUresult rc);
  void disarm();
  // Forgets the log.
  void clear();
  // Records of calls of `id` since the last clear(), oldest first.
  std::vector<CallRecord> take(CallId id);

  // ---- What the session and the hand-written server calls use on their own.
  CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                          CUdevice dev) override;
  CUresult cuCtxDestroy_v2(CUcontext ctx) override { return CUDA_SUCCESS; }
  CUresult cuCtxGetCurrent(CUcontext* pctx) override;
  CUresult cuCtxSetCurrent(CUcontext ctx) override;
  CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                             void** jitOptionsValues, unsigned int numJitOptions,
                             CUlibraryOption* libraryOptions, void** libraryOptionValues,
                             unsigned int numLibraryOptions) override;

 protected:
  // One call being recorded; the generated overrides build one per call.
  class Recorder {
   public:
    Recorder(RecordingBackend& backend, CallId id, size_t params);

    template <typename T>
    void value(size_t i, const T& v) {
      rec_.in[i].bytes.resize(sizeof v);
      std::memcpy(rec_.in[i].bytes.data(), &v, sizeof v);
    }
    void in(size_t i, const void* p, size_t n);
    void string(size_t i, const char* s);
    // A module image: all bulk bytes of the frame from p on (server/session/bulk_extent.h).
    void image(size_t i, const void* p);
    void out_pointer(size_t i, const void* p) { rec_.in[i].present = p != nullptr; }
    void out_bytes(size_t i, void* p, size_t n);
    template <typename H>
    void out_handles(size_t i, H* p, size_t n) {
      if (!p) return;
      for (size_t k = 0; k < n; ++k) p[k] = reinterpret_cast<H>(backend_.fake_handle());
      keep_out(i, p, n * sizeof(H));
    }
    void out_allocation(size_t i, CUdeviceptr* p);
    // Logs the call; returns the armed result.
    CUresult done();

   private:
    void keep_out(size_t i, const void* p, size_t n);

    RecordingBackend& backend_;
    CallRecord rec_;
    uint64_t seed_;
  };

  void* fake_handle();
  CUdeviceptr fake_allocation();

 private:
  std::mutex mu_;
  std::vector<CallRecord> log_;       // guarded by mu_
  uint32_t armed_id_ = 0;             // guarded by mu_
  CUresult armed_rc_ = CUDA_SUCCESS;  // guarded by mu_
  std::atomic<uint64_t> handles_{0};
  std::atomic<uint64_t> allocations_{0};
  std::atomic<uint64_t> calls_{0};
  std::atomic<CUcontext> current_{nullptr};
};

}  // namespace cuwire::roundtrip
