// Host functions in stream order (cuLaunchHostFunc, cuStreamAddCallback, host nodes): the
// server's side. A function pointer never crosses the wire: the client keeps the function
// under an id and sends the id. The server puts a callback of its own on the backend stream
// (HostCallChannel::enqueue); when the stream reaches it, the callback asks the client, over
// the session's host-call connection (cuwire.capnp: Hello.hostCalls), to run function `id`,
// and holds the stream until the client says it returned. The enqueuing call returns at once,
// and the stream's later work waits, as CUDA specifies.
//
// Each session has one channel, made at its Welcome, whose random key the Welcome tells the
// client; the host-call connection presents the session's id, that key and a token of the
// same tenant (HostCallRegistry::find). A channel never outlives its use: when the session
// ends (or drains), or its host-call connection goes, the channel closes, every callback
// waiting on it returns, and later ones return at once: a client that never answers holds
// only its own streams, and only until its session ends.
//
// Managed memory (client-lib/calls/managed_memory.h) lives in host mirrors on the client, which lag
// the device between synchronisations. So a host function may come with views: the session's
// managed ranges the client mirrors, checked at enqueue. The HostCall frame brings their
// current bytes (when the client asked: only if device work may have written them since its
// last pull), and the HostCallDone the bytes the function wrote, which go into device memory
// before the callback returns and the stream goes on. The callback thread reads and writes them
// directly, never through a driver call: the session's thread may be blocked in the app's
// synchronisation of this very stream. A free of memory a waiting host function views waits
// for it (wait_unused), as CUDA's free waits for the work before it.
//
// Thread-safety: all functions are safe from any thread. The backend runs callbacks on its
// own threads (the sim's stream workers, the driver's callback thread).
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "protocol/byte_stream.h"
#include "server/backend/backend.h"
#include "server/session/log_rate_limit.h"

namespace cuwire::server {

class Tenant;

// Device memory a host function may read and write, where this process can address it.
struct HostCallView {
  CUdeviceptr device = 0;
  uint8_t* host = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> keep;  // keeps `host` valid (the sim's allocation); null elsewhere
};

class HostCallChannel : public std::enable_shared_from_this<HostCallChannel> {
 public:
  // Host functions one session may have enqueued and not yet finished.
  static constexpr size_t kMaxPending = 1 << 16;
  // Views of one host function, and the bytes they may span together.
  static constexpr size_t kMaxViews = 4096;
  static constexpr uint64_t kMaxViewBytes = uint64_t{256} << 20;
  // Views of all host functions of the session not yet returned.
  static constexpr size_t kMaxChannelViews = 1 << 16;
  // The largest HostCallDone bulk a client may send: the bytes of every view, in runs.
  static constexpr uint64_t kMaxDoneBytes = kMaxViewBytes + (kMaxViewBytes >> 12) * 32;

  // The host-call connection's stream; false when one is attached already or the channel is
  // closed. The stream must stay valid until detach().
  bool attach(ByteStream* stream);
  // The host-call connection is going: the channel closes (see close()).
  void detach();
  bool attached() const;

  // Puts host function `id` of the client on `stream` of `api`: CUDA_ERROR_NOT_PERMITTED
  // without a host-call connection, CUDA_ERROR_OUT_OF_MEMORY past kMaxPending, else the
  // backend's answer. `views`: memory the function may read and write; `send_bytes`: the
  // HostCall brings their bytes.
  CUresult enqueue(Backend& api, CUstream stream, uint64_t id, std::vector<HostCallView> views = {},
                   bool send_bytes = false);
  // The client's HostCallDone for `id`, with the bytes the function wrote (memory_runs.h),
  // which must lie in its views (runs outside them are dropped).
  void done(uint64_t id, std::vector<uint8_t> writes = {});
  // Waits until no host function enqueued and not yet returned views [p, p + n) (or the channel
  // closes).
  void wait_unused(CUdeviceptr p, size_t n);
  // Releases every waiting callback, makes later ones return at once, and shuts the host-call
  // connection down.
  void close();

 private:
  struct Views {
    std::vector<HostCallView> views;
    bool send_bytes = false;
  };
  // On a backend thread, when the stream reaches the function: asks the client and waits.
  void run(uint64_t id, uint64_t serial, CUresult status);
  static void CUDA_CB trampoline(CUstream stream, CUresult status, void* ticket);
  void erase_views_locked(uint64_t serial);
  // Writes the client's runs into the views; false when one lay outside them (it is dropped).
  static bool apply(const std::vector<HostCallView>& views, std::span<const uint8_t> writes);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  ByteStream* stream_ = nullptr;     // guarded by mu_ (and write_mu_ to be cleared)
  bool closed_ = false;              // guarded by mu_
  std::set<uint64_t> asked_;         // guarded by mu_: sent to the client, not yet done
  size_t pending_ = 0;               // guarded by mu_: enqueued, their callback not yet returned
  uint64_t next_serial_ = 1;         // guarded by mu_
  std::map<uint64_t, Views> views_;  // guarded by mu_: by serial, until the callback returned
  size_t views_held_ = 0;            // guarded by mu_: views in views_
  std::map<uint64_t, std::vector<uint8_t>> writes_;  // guarded by mu_: by id, done's bytes
  LogRateLimit bad_writes_log_;                      // guarded by mu_
  std::mutex write_mu_;  // one frame at a time on the host-call connection
};

// The server's channels, by session id, for host-call connections to find.
class HostCallRegistry {
 public:
  // A channel for session `session` of `tenant` (null: an open server); *key gets its key.
  std::shared_ptr<HostCallChannel> open(uint64_t session, const Tenant* tenant, std::string* key);
  void remove(uint64_t session);
  // The channel of `session` when `key` is its key and `tenant` its tenant; null otherwise.
  std::shared_ptr<HostCallChannel> find(uint64_t session, const std::string& key,
                                        const Tenant* tenant) const;

  static constexpr size_t kKeyBytes = 16;

 private:
  struct Entry {
    std::weak_ptr<HostCallChannel> channel;
    std::string key;
    const Tenant* tenant = nullptr;
  };
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;  // guarded by mu_
};

}  // namespace cuwire::server
