// CallExecutor: how one session's calls run, apart from the connection that carries them
// (session.h). It holds the session's state for what it is:
//   - SessionContext: the session's handle table, its memory, its deferred error (dispatch.h);
//   - device printf text waiting for the session's next synchronizing reply;
//   - a relay's epoch (upstream.h);
// and it is the one place before and after every call (before_call, after_call) where limits,
// accounting, admission and timing hook in.
//
// Thread affinity, a contract the whole server relies on: a session's calls run on one OS
// thread, the session's, for the session's whole life, and only there. The backend's current
// context is that thread's (the driver keeps it per thread, as CUDA does), so the context a call
// runs in is set on the session's thread and stays until the next call changes it; the
// executor skips cuCtxSetCurrent when it is already right. The sim's context stacks, the
// client-side capture-mode rewrite and the image bounds of a call (bulk_extent.h)
// are all per thread for the same reason (the contract is written at the seam: backend.h).
// A CallExecutor is therefore created, used and destroyed on that one thread.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "server/backend/backend.h"
#include "server/calls/copies.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

struct SessionConfig;
class DeviceOutputSource;
class ComputeGate;
class Tenant;
class SessionStats;

class CallExecutor {
 public:
  // `warn`: logs a line the client can trigger at will (rate-limited by the session).
  using WarnFn = std::function<void(const std::string&)>;
  // `tenant`: whom the session's memory and GPU time are charged to (tenants.h); null: nobody.
  // `gpu`: the backend device the session was placed on (-1: none), for its figures.
  // `stats`: where the session's figures go when another process keeps them (a session in a
  // worker records into the front's block); null: the tenant's own, opened here.
  CallExecutor(Backend& backend, const SessionConfig& config, Tenant* tenant, std::string who,
               WarnFn warn, int gpu = -1, std::shared_ptr<SessionStats> stats = nullptr);
  // Reclaims what the session still holds (see finish()).
  ~CallExecutor();
  CallExecutor(const CallExecutor&) = delete;
  CallExecutor& operator=(const CallExecutor&) = delete;

  // The session's host-call channel (host_calls.h); null: none.
  void set_host_calls(std::shared_ptr<HostCallChannel> c) { cx_.set_host_calls(std::move(c)); }

  // The backend devices the session sees, its device 0 first (placement.h).
  void set_devices(std::vector<CUdevice> devices) { cx_.set_devices(std::move(devices)); }

  // Runs one call whose arguments are `call` and `bulk`. With `wants_reply`, *reply is the
  // encoded Reply message and *reply_bulk its bulk bytes (both valid until the next call);
  // without, the call's error is kept for the session's next synchronizing call.
  // `arrival`: when the call's frame was read, for its queue time (stats.h).
  // `channel`: for a call whose bulk bytes stream (server/calls/copies.h), the connection's side;
  // its request bytes are not in `bulk`, and a reply it began (reply_begun) is not in *reply.
  // Returns the call's result, which a begun reply's trailer carries.
  CUresult execute(const CallView& call, std::span<const uint8_t> bulk, bool wants_reply,
                   std::vector<uint8_t>* reply, std::span<const uint8_t>* reply_bulk,
                   std::chrono::steady_clock::time_point arrival, BulkChannel* channel = nullptr);
  // The message of a streamed reply, sent before its bytes: the outs so far, a provisional
  // CUDA_SUCCESS, and the device printf text a synchronizing reply carries.
  void encode_streamed_reply(const CallView& call, std::vector<uint8_t>* msg);

  // Gives back what the session still holds on the backend, once; logs what it reclaimed.
  void finish();

  // Bytes of buffers the executor keeps between calls; large ones are given back after the
  // call that needed them.
  size_t retained_bytes() const;
  void release_large_buffers();

  // The session's figures (null without a tenant).
  std::shared_ptr<const SessionStats> stats() const { return stats_; }

 private:
  // The hooks around every call: before_call may refuse it (its result is the call's);
  // after_call sees every result.
  CUresult before_call(const CallView& call);
  void after_call(const CallView& call, CUresult rc);
  CUresult run(const CallView& call, std::span<const uint8_t> bulk, bool* known, bool* malformed);
  // execute() but for the figures; *rc: the call's result.
  void execute_call(const CallView& call, std::span<const uint8_t> bulk, bool wants_reply,
                    std::vector<uint8_t>* reply, std::span<const uint8_t>* reply_bulk, CUresult* rc,
                    BulkChannel* channel);
  // Device printf for a synchronizing call's reply: the backend's pending text of the
  // session's contexts, or what a capture window collected.
  void collect_device_output(const CallView& call);

  Backend& backend_;
  const SessionConfig& config_;
  std::string who_;  // "session N (client)" for log lines
  WarnFn warn_;
  SessionContext cx_;
  std::unique_ptr<ComputeGate> compute_;  // with compute caps on some GPU; before cx_ dies
  std::unique_ptr<ReplyWriter> out_;
  bool finished_ = false;

  // Device printf (backend.h: DeviceOutputSource; stdout_capture.h).
  DeviceOutputSource* device_output_ = nullptr;
  std::set<uint64_t> output_contexts_;  // contexts the session ran calls in
  std::string output_text_;             // this reply's
  std::string captured_;                // collected by capture windows, not yet sent
  size_t captured_dropped_ = 0;

  // Streamed copies (server/calls/copies.h): the backend's device memory in place, or staging
  // buffers made on the first streamed copy that needs them.
  DeviceMemoryIo* direct_ = nullptr;
  std::unique_ptr<CopyStaging> staging_;

  // A relay (upstream.h): the session's epoch.
  uint64_t epoch_ = 0;
  // A relay: this session's own upstream session (UpstreamLink::open_session); null: none.
  void* upstream_session_ = nullptr;

  // The session's figures (stats.h); null without a tenant. tenant_: whose figures they joined
  // here (null: another process keeps them).
  Tenant* tenant_ = nullptr;
  std::shared_ptr<SessionStats> stats_;
};

}  // namespace cuwire::server
