// libFuzzer target for the call dispatcher: what one session's calls can do to the server, on
// the sim backend. Each input is a short sequence of calls, as a session would run them after
// its Hello; the session then ends and everything it held is reclaimed. A crash, a sanitizer
// report or a leak is a finding; error returns are the expected outcome of almost every input.
//
// Input: records of
//   u32 call id (an id the manifest does not have is refused, as a session refuses it),
//   u8  flags (bit 0: run in the session's context), u16 args length, u32 bulk length,
//   args bytes, bulk bytes
// until the input runs out. tests/fuzz/dispatch_corpus/ holds seeds in this format, written by
// tests/fuzz/make_dispatch_seeds.py.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <spdlog/spdlog.h>

#include "generated/call_ids.h"
#include "protocol/handle_kind.h"
#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/backend/sim/sim_backend.h"
#include "server/session/bulk_extent.h"
#include "server/session/dispatch.h"

namespace {

using namespace cuwire;
using namespace cuwire::server;

// Calls that wait, by design, for something only another party can do (a value another
// stream writes): a session can hang itself with them, which the idle and drain timeouts of
// the server bound, not the dispatcher.
bool waits_by_design(uint32_t id) {
  switch (static_cast<CallId>(id)) {
    case CallId::k_cuStreamWaitValue32_v2:
    case CallId::k_cuStreamWaitValue64_v2:
      return true;
    default:
      return false;
  }
}

server::Backend& backend() {
  static std::unique_ptr<server::Backend> api = [] {
    spdlog::set_level(spdlog::level::off);
    SimOptions o;
    o.gpus = 2;
    o.memory_bytes = 256u << 20;
    // Kernels from fuzzed PTX may never end: a small budget keeps each run short.
    o.instruction_budget = 1u << 20;
    std::unique_ptr<server::Backend> sim = make_sim_backend(o);
    sim->cuInit(0);
    return sim;
  }();
  return *api;
}

template <typename T>
bool take(const uint8_t*& p, const uint8_t* end, T* v) {
  if (static_cast<size_t>(end - p) < sizeof(T)) return false;
  std::memcpy(v, p, sizeof(T));
  p += sizeof(T);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  server::Backend& api = backend();
  SessionContext cx(api);
  // The session's context, bound as the client would bind its primary context.
  constexpr uint64_t kContextId = kClientIdBase + 1;
  CUcontext ctx = nullptr;
  if (api.cuCtxCreate_v4(&ctx, nullptr, 0, 0) != CUDA_SUCCESS) return 0;
  if (cx.bind(HandleKind::kContext, kContextId, ctx) != CUDA_SUCCESS) return 0;
  ReplyWriter out(64u << 20);
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  for (int calls = 0; calls < 32; ++calls) {
    uint32_t id = 0, bulk_len = 0;
    uint8_t flags = 0;
    uint16_t args_len = 0;
    if (!take(p, end, &id) || !take(p, end, &flags) || !take(p, end, &args_len) ||
        !take(p, end, &bulk_len)) {
      break;
    }
    if (static_cast<size_t>(end - p) < args_len) break;
    std::span<const uint8_t> args(p, args_len);
    p += args_len;
    bulk_len = static_cast<uint32_t>(std::min<size_t>(bulk_len, static_cast<size_t>(end - p)));
    std::vector<uint8_t> bulk(p, p + bulk_len);  // the session owns its frame's bulk
    p += bulk_len;
    if (waits_by_design(id)) continue;
    // Each call runs in the session's context, or in none, as the Call says.
    const bool in_context = flags & 1;
    CUcontext want = nullptr;
    if (in_context && cx.lookup(HandleKind::kContext, kContextId, &want) == CUDA_SUCCESS) {
      api.cuCtxSetCurrent(want);
      cx.set_current_context(kContextId);
    } else {
      api.cuCtxSetCurrent(nullptr);
      cx.set_current_context(0);
    }
    ArgReader in(args, bulk);
    out.clear();
    bool known = false;
    CUresult rc;
    {
      BulkScope scope(bulk);
      rc = dispatch_call(id, cx, in, out, &known);
    }
    if (rc != CUDA_SUCCESS) cx.defer_error(rc);
  }
  // The session ends: the server reclaims what it held, then the context itself.
  api.cuCtxSetCurrent(nullptr);
  cx.reclaim();
  return 0;
}
