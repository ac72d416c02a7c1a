// The round-trip fixture: an in-process gpu-server on a RecordingBackend, the client being
// cuwire's own libcuda.so.1, and what the generated per-call functions (roundtrip_test.cc)
// need: distinct argument values, handles and device memory made through the stubs, and the
// checks on both sides of the wire.
//
// Each call runs in rounds: kRoundError (the backend answers kBackendError: the stub, or the
// next synchronising call for async calls, must return it and leave the caller's out buffers
// alone), kRoundSuccess (every output the backend wrote must reach the caller), and for calls
// with optional pointers kRoundNullOpts (those pointers null: the backend must see null).
// The error round comes first so that cached calls (answered by the client after one
// success) still reach the server.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/handle_kind.h"
#include "tests/roundtrip/recording_backend.h"

namespace cuwire::roundtrip {

// What the backend answers in the error round: one no cuwire layer produces itself, so seeing
// it proves the backend's own answer came back.
inline constexpr CUresult kBackendError = CUDA_ERROR_ECC_UNCORRECTABLE;
inline constexpr int kRoundError = 0;
inline constexpr int kRoundSuccess = 1;
inline constexpr int kRoundNullOpts = 2;

// A module image the stubs and the server accept (PTX text; the backend never parses it).
extern const char kRoundTripPtx[];

// Argument values for one round of one call: distinct per call, round and parameter.
class Values {
 public:
  Values(CallId id, int round)
      : seed_(mix((uint64_t{static_cast<uint32_t>(id)} << 8) | unsigned(round))) {}

  // Every byte set. Enums get 1, which every CUDA enum's range holds.
  template <typename T>
  T value(size_t param) const {
    if constexpr (std::is_enum_v<T>) {
      return static_cast<T>(1);
    } else {
      T v;
      fill_pattern(&v, sizeof v, seed_ + param * 0x100);
      return v;
    }
  }
  // 3..34: for counts and sizes that arrays and device ranges are made from.
  template <typename T>
  T small(size_t param) const {
    // An enum that sizes something (cuMemPoolGetAttribute's attr) must stay inside its
    // enumerators' range, or merely loading it is undefined; 1 is a valid value of those.
    if constexpr (std::is_enum_v<T>) {
      return static_cast<T>(1);
    } else {
      return static_cast<T>(3 + mix(seed_ + param) % 32);
    }
  }
  void fill(void* p, size_t n, size_t param) const {
    fill_pattern(p, n, seed_ + param * 0x100 + 1);
  }
  std::string text(size_t param) const;

 private:
  uint64_t seed_;
};

// What the backend must have received, parameter by parameter.
class Expected {
 public:
  Expected() = default;
  Expected(std::initializer_list<const char*> names) : names_(names), args_(names.size()) {}

  template <typename T>
  void value(size_t i, const T& v) {
    bytes(i, &v, sizeof v);
  }
  void bytes(size_t i, const void* p, size_t n);
  void string(size_t i, const char* s) { bytes(i, s, std::strlen(s) + 1); }
  void out(size_t i) { args_[i] = ArgRecord{}; }
  void absent(size_t i) { args_[i] = ArgRecord{false, {}}; }

  const std::vector<ArgRecord>& args() const { return args_; }
  const char* name(size_t i) const { return names_[i]; }

 private:
  std::vector<const char*> names_;
  std::vector<ArgRecord> args_;
};

// A handle as the app holds it and as the backend knows it.
template <typename H>
struct Handle {
  H client;
  H backend;
};

class RoundTripTest;

struct RoundTripCase {
  const char* name;
  void (*run)(RoundTripTest& t, int round);
  int rounds;
};
struct SkippedCall {
  const char* name;
  const char* why;
};

// Generated (roundtrip_test.cc).
extern const RoundTripCase kRoundTripCases[];
extern const size_t kRoundTripCaseCount;
extern const SkippedCall kSkippedCalls[];
extern const size_t kSkippedCallCount;
std::unique_ptr<RecordingBackend> make_recording_backend();

void PrintTo(const RoundTripCase& c, std::ostream* os);

class RoundTripTest : public ::testing::TestWithParam<RoundTripCase> {
 public:
  // A fresh handle of `kind`, made through the stubs.
  template <typename H>
  Handle<H> make(HandleKind kind) {
    auto [client, backend] = make_raw(kind);
    return {static_cast<H>(client), static_cast<H>(backend)};
  }
  // A device pointer inside a fresh allocation of this session, with room for any range the
  // small values make.
  CUdeviceptr range_pointer();
  // The base of a fresh allocation, for calls that free it.
  CUdeviceptr allocation();
  void prefill(void* p, size_t n) { std::memset(p, kClientFill, n); }

  void arm(CallId id, CUresult rc);
  // After the stub returned rc: for async calls, collects the deferred result with a
  // synchronising call; checks the result against `want` and the one backend record of `id`
  // against `x`, and returns that record.
  CallRecord finish(CallId id, bool async, CUresult rc, CUresult want, const Expected& x);
  // The caller's out buffer holds what the backend wrote to parameter i.
  void expect_out(const CallRecord& r, size_t i, const void* client, size_t n);
  // The caller's handles name the handles the backend wrote to parameter i.
  void expect_out_handles(const CallRecord& r, size_t i, HandleKind kind, const void* client,
                          size_t count);
  void expect_untouched(const void* client, size_t n);

 private:
  std::pair<void*, void*> make_raw(HandleKind kind);
  // The backend handle a client handle stands for, learnt through a call that takes it;
  // nullptr where no such call is generated.
  void* backend_handle(HandleKind kind, void* client);
  bool has_probe(HandleKind kind) const;
};

}  // namespace cuwire::roundtrip
