#include "tests/roundtrip/roundtrip_fixture.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "tests/support/test_support.h"

namespace cuwire::roundtrip {

const char kRoundTripPtx[] =
    "//\n// cuwire round-trip test image\n//\n.version 7.0\n.target sm_50\n.address_size 64\n\n"
    ".visible .entry rt_kernel()\n{\n\tret;\n}\n";

namespace {

// Room behind every range_pointer(): more than any range the small values (<= 34) describe.
constexpr size_t kRangeAllocation = size_t{1} << 20;
constexpr CUdeviceptr kRangeOffset = 64;
// Fewer covered calls than this means the generator stopped covering calls it used to.
// (cuMemcpyHtoD_v2 and cuMemcpyHtoDAsync_v2 left the generated side for streamed copies,
// server/calls/copies.cc; fast_path_test covers them. cuGraphCreate and cuStreamEndCapture
// left it for client graphs, client-lib/calls/graphs.cc; e2e.graph_nodes covers them.
// cuMemAllocFromPoolAsync left it to record graph-owned memory made in a capture,
// server/calls/pools.cc; Tenants.CapHoldsOnEveryAllocationPath (pool, graph) covers it.
// cuDeviceGetDefaultMemPool, cuMemGetDefaultMemPool and cuMemPoolDestroy left it for each
// session's own default pool, AttackTest.DefaultMemoryPoolIsEachSessionsOwn and e2e.mem_pools
// cover them; cuLibraryGetManaged for __managed__ variables' ranges, e2e.managed_vars.
// cuMemPoolSetAccess gained verify_pool_access, which asks the backend what a pool reaches;
// PoolAccess.* and e2e.mem_pools cover it. cuCtxSetLimit charges what a limit reserves to the
// tenant; AttackOnCaps.ContextLimitsAreChargedToTheTenant and e2e.device_heap cover it.)
constexpr size_t kCoverageFloor = 109;

RecordingBackend* g_backend = nullptr;

// One server on a recording backend and one client connection for the whole binary (the
// library holds one connection per process, as a real app does).
class RoundTripEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    backend_ = make_recording_backend();
    g_backend = backend_.get();
    server_ = std::make_unique<testing::TestServer>(
        testing::TestServerOptions{.backend = backend_.get()});
    ASSERT_TRUE(server_->ok()) << server_->status().to_string();
    server_->export_address();
  }
  void TearDown() override {
    server_.reset();
    g_backend = nullptr;
    backend_.reset();
  }

 private:
  std::unique_ptr<RecordingBackend> backend_;
  std::unique_ptr<testing::TestServer> server_;
};

std::string name_of(CallId id) {
  const char* n = call_name(static_cast<uint32_t>(id));
  return n ? n : "call " + std::to_string(static_cast<uint32_t>(id));
}

std::string result_name(CUresult rc) {
  const char* n = nullptr;
  cuGetErrorName(rc, &n);
  return std::string(n ? n : "?") + " (" + std::to_string(rc) + ")";
}

std::string hex(const std::vector<uint8_t>& b) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < b.size() && i < 48; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    s += buf;
  }
  if (b.size() > 48) s += "...";
  return s + " (" + std::to_string(b.size()) + " bytes)";
}

std::string describe(const ArgRecord& a) { return a.present ? hex(a.bytes) : std::string("null"); }

void* pointer_at(const std::vector<uint8_t>& bytes, size_t k) {
  void* p = nullptr;
  if (bytes.size() >= (k + 1) * sizeof p) std::memcpy(&p, bytes.data() + k * sizeof p, sizeof p);
  return p;
}

// How a handle's value on the backend is found: a call that carries the handle, whose parameter
// `param` is the handle as the backend got it.
struct Probe {
  HandleKind kind;
  CallId id;
  size_t param;
  CUresult (*call)(void* handle);
};

// `call` of the handle alone.
template <typename H, CUresult (*call)(H)>
CUresult call_on(void* h) {
  return call(static_cast<H>(h));
}

// `count` of the handle's contents (functions of a module, kernels of a library).
template <typename H, CUresult (*count)(unsigned*, H)>
CUresult count_of(void* h) {
  unsigned n = 0;
  return count(&n, static_cast<H>(h));
}

const Probe kProbes[] = {
    {HandleKind::kContext, CallId::k_cuCtxGetApiVersion, 0,
     [](void* h) {
       unsigned version = 0;
       return cuCtxGetApiVersion(static_cast<CUcontext>(h), &version);
     }},
    {HandleKind::kStream, CallId::k_cuStreamQuery, 0, call_on<CUstream, cuStreamQuery>},
    {HandleKind::kEvent, CallId::k_cuEventQuery, 0, call_on<CUevent, cuEventQuery>},
    {HandleKind::kModule, CallId::k_cuModuleGetFunctionCount, 1,
     count_of<CUmodule, cuModuleGetFunctionCount>},
    {HandleKind::kFunction, CallId::k_cuFuncLoad, 0, call_on<CUfunction, cuFuncLoad>},
    {HandleKind::kLibrary, CallId::k_cuLibraryGetKernelCount, 1,
     count_of<CUlibrary, cuLibraryGetKernelCount>},
    {HandleKind::kKernel, CallId::k_cuKernelGetFunction, 1,
     [](void* h) {
       CUfunction f = nullptr;
       return cuKernelGetFunction(&f, static_cast<CUkernel>(h));
     }},
    // A query: shared pools (a device's default) may not be changed.
    {HandleKind::kMemoryPool, CallId::k_cuMemPoolGetAttribute, 0,
     [](void* h) {
       cuuint64_t v = 0;
       return cuMemPoolGetAttribute(static_cast<CUmemoryPool>(h), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                    &v);
     }},
};

const Probe* probe_of(HandleKind kind) {
  for (const Probe& p : kProbes) {
    if (p.kind == kind) return &p;
  }
  return nullptr;
}

// A handle of type H that `create` makes, with the driver's result in *rc.
template <typename H, typename Create>
void* made(CUresult* rc, Create create) {
  H handle = nullptr;
  *rc = create(&handle);
  return handle;
}

}  // namespace

std::string Values::text(size_t param) const {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rt-%016" PRIx64 "-%zu", mix(seed_ + param), param);
  return buf;
}

void Expected::bytes(size_t i, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  args_[i] = ArgRecord{true, std::vector<uint8_t>(b, b + n)};
}

void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.name; }

// ---------------------------------------------------------------------------------------------
// RoundTripTest

CUdeviceptr RoundTripTest::allocation() {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, kRangeAllocation), CUDA_SUCCESS);
  EXPECT_NE(p, 0u);
  return p;
}

CUdeviceptr RoundTripTest::range_pointer() { return allocation() + kRangeOffset; }

std::pair<void*, void*> RoundTripTest::make_raw(HandleKind kind) {
  void* h = nullptr;
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  switch (kind) {
    case HandleKind::kContext:
      h = made<CUcontext>(&rc, [](CUcontext* c) {
        CUresult r = cuCtxCreate_v4(c, nullptr, 0, 0);
        // Created contexts become current; calls of the test carry no context.
        return r == CUDA_SUCCESS ? cuCtxPopCurrent_v2(nullptr) : r;
      });
      break;
    case HandleKind::kStream:
      h = made<CUstream>(&rc, [](CUstream* s) { return cuStreamCreate(s, 0); });
      break;
    case HandleKind::kEvent:
      h = made<CUevent>(&rc, [](CUevent* e) { return cuEventCreate(e, 0); });
      break;
    case HandleKind::kModule:
      h = made<CUmodule>(&rc, [](CUmodule* m) { return cuModuleLoadData(m, kRoundTripPtx); });
      break;
    case HandleKind::kFunction: {
      CUmodule m = make<CUmodule>(HandleKind::kModule).client;
      h = made<CUfunction>(&rc,
                           [m](CUfunction* f) { return cuModuleGetFunction(f, m, "rt_kernel"); });
      break;
    }
    case HandleKind::kLibrary:
      h = made<CUlibrary>(&rc, [](CUlibrary* l) {
        return cuLibraryLoadData(l, kRoundTripPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
      });
      break;
    case HandleKind::kKernel: {
      CUlibrary l = make<CUlibrary>(HandleKind::kLibrary).client;
      h = made<CUkernel>(&rc, [l](CUkernel* k) { return cuLibraryGetKernel(k, l, "rt_kernel"); });
      break;
    }
    case HandleKind::kMemoryPool:
      h = made<CUmemoryPool>(&rc, [](CUmemoryPool* p) {
        CUmemPoolProps props{};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        return cuMemPoolCreate(p, &props);
      });
      break;
    default:
      ADD_FAILURE() << "the round-trip fixture cannot make handles of kind "
                    << static_cast<int>(kind);
      return {nullptr, nullptr};
  }
  EXPECT_EQ(rc, CUDA_SUCCESS) << "making a handle of kind " << static_cast<int>(kind);
  EXPECT_NE(h, nullptr);
  void* b = backend_handle(kind, h);
  EXPECT_NE(b, nullptr) << "handle of kind " << static_cast<int>(kind) << " unknown to the server";
  return {h, b};
}

bool RoundTripTest::has_probe(HandleKind kind) const { return probe_of(kind) != nullptr; }

void* RoundTripTest::backend_handle(HandleKind kind, void* client) {
  g_backend->clear();
  const Probe* probe = probe_of(kind);
  if (!probe) return nullptr;
  const CallId id = probe->id;
  const size_t param = probe->param;
  CUresult rc = probe->call(client);
  EXPECT_EQ(rc, CUDA_SUCCESS) << "probing a handle with " << name_of(id) << ": " << result_name(rc);
  std::vector<CallRecord> recs = g_backend->take(id);
  if (recs.size() != 1 || recs[0].in.size() <= param) {
    ADD_FAILURE() << name_of(id) << " reached the backend " << recs.size() << " times";
    return nullptr;
  }
  return pointer_at(recs[0].in[param].bytes, 0);
}

void RoundTripTest::arm(CallId id, CUresult rc) { g_backend->arm(id, rc); }

CallRecord RoundTripTest::finish(CallId id, bool async, CUresult rc, CUresult want,
                                 const Expected& x) {
  const std::string name = name_of(id);
  if (async) {
    EXPECT_EQ(rc, CUDA_SUCCESS) << name << ": an async stub answers before the server runs it";
    // The server ran the call before this one; its error, if any, comes back here.
    rc = cuCtxSynchronize();
  }
  g_backend->disarm();
  EXPECT_EQ(rc, want) << name << " returned " << result_name(rc) << ", the backend answered "
                      << result_name(want);
  std::vector<CallRecord> recs = g_backend->take(id);
  if (recs.size() != 1) {
    ADD_FAILURE() << name << " reached the backend " << recs.size() << " times, not once";
    return {};
  }
  CallRecord& r = recs[0];
  if (r.in.size() != x.args().size()) {
    ADD_FAILURE() << name << ": backend saw " << r.in.size() << " parameters, expected "
                  << x.args().size();
    return {};
  }
  for (size_t i = 0; i < r.in.size(); ++i) {
    EXPECT_TRUE(r.in[i] == x.args()[i])
        << name << " parameter " << i << " '" << x.name(i) << "': the backend got "
        << describe(r.in[i]) << ", the caller passed " << describe(x.args()[i]);
  }
  return r;
}

void RoundTripTest::expect_out(const CallRecord& r, size_t i, const void* client, size_t n) {
  ASSERT_LT(i, r.out.size());
  const std::string name = name_of(static_cast<CallId>(r.id));
  const std::vector<uint8_t>& wrote = r.out[i].bytes;
  ASSERT_EQ(wrote.size(), n) << name << " parameter " << i << ": the backend wrote " << wrote.size()
                             << " bytes, the caller's buffer holds " << n;
  auto* b = static_cast<const uint8_t*>(client);
  EXPECT_TRUE(std::equal(wrote.begin(), wrote.end(), b))
      << name << " parameter " << i << ": the caller got " << hex(std::vector<uint8_t>(b, b + n))
      << ", the backend wrote " << hex(wrote);
}

void RoundTripTest::expect_out_handles(const CallRecord& r, size_t i, HandleKind kind,
                                       const void* client, size_t count) {
  ASSERT_LT(i, r.out.size());
  const std::string name = name_of(static_cast<CallId>(r.id));
  const std::vector<uint8_t>& wrote = r.out[i].bytes;
  ASSERT_EQ(wrote.size(), count * sizeof(void*)) << name << " parameter " << i;
  auto* b = static_cast<const uint8_t*>(client);
  std::vector<uint8_t> mine(b, b + count * sizeof(void*));
  for (size_t k = 0; k < count; ++k) {
    void* c = pointer_at(mine, k);
    void* backend = pointer_at(wrote, k);
    const std::string where =
        name + " parameter " + std::to_string(i) + "[" + std::to_string(k) + "]";
    ASSERT_NE(c, nullptr) << where;
    // The client holds ids, never the backend's handles.
    EXPECT_NE(c, backend) << where;
    if (has_probe(kind)) {
      EXPECT_EQ(backend_handle(kind, c), backend)
          << where << ": the id the caller got names another handle";
    } else {
      const auto id = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(c));
      EXPECT_TRUE(id >= kServerIdBase && id < kServerIdBase + kIdRange)
          << where << ": " << id << " is no server-assigned id";
    }
    for (size_t j = 0; j < k; ++j) {
      EXPECT_NE(pointer_at(mine, j), c) << where << ": two handles got one id";
    }
  }
}

void RoundTripTest::expect_untouched(const void* client, size_t n) {
  auto* b = static_cast<const uint8_t*>(client);
  for (size_t k = 0; k < n; ++k) {
    if (b[k] != kClientFill) {
      ADD_FAILURE() << "a failed call wrote the caller's out buffer at byte " << k;
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tests

TEST_P(RoundTripTest, Call) {
  const RoundTripCase& c = GetParam();
  for (int round = 0; round < c.rounds; ++round) {
    SCOPED_TRACE(std::string(c.name) + (round == kRoundError     ? ": error round"
                                        : round == kRoundSuccess ? ": success round"
                                                                 : ": null optional pointers"));
    c.run(*this, round);
  }
}

INSTANTIATE_TEST_SUITE_P(Manifest, RoundTripTest,
                         ::testing::ValuesIn(kRoundTripCases,
                                             kRoundTripCases + kRoundTripCaseCount),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(RoundTripCoverage, AboveFloor) {
  std::printf("round trips: %zu calls covered; %zu with a generated side skipped:\n",
              kRoundTripCaseCount, kSkippedCallCount);
  for (size_t i = 0; i < kSkippedCallCount; ++i) {
    std::printf("  %-44s %s\n", kSkippedCalls[i].name, kSkippedCalls[i].why);
  }
  EXPECT_GE(kRoundTripCaseCount, kCoverageFloor);
}

}  // namespace cuwire::roundtrip

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new cuwire::roundtrip::RoundTripEnvironment);
  return RUN_ALL_TESTS();
}
