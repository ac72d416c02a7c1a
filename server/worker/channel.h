// The channel between gpu-server's front and one of its workers (design decision 14): a
// SOCK_SEQPACKET socketpair, one message per packet, descriptors passed beside a message
// (SCM_RIGHTS). The front passes a worker its settings, then each session handed to it with the
// client's socket; the worker says when it is ready and when each session has ended. The front
// trusts nothing a worker sends: a packet that does not decode ends that worker.
//
// The front's end never blocks in send(): a worker that does not read its channel (stopped, or
// misbehaving) fails the send with kRejected instead of holding the front, which then treats
// the worker as hung. A worker's end blocks, as the front always reads.
//
// Thread-safety: send() from any thread (one packet is one sendmsg); receive() from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/status.h"

namespace cuwire::server {

// What the front tells a worker.
struct ToWorker {
  enum class Kind { kInit, kOpen, kDrain, kEvict, kCaps, kQuit, kPing, kHostCalls };
  Kind kind = Kind::kQuit;

  struct Caps {
    uint64_t memory_bytes = 0;
    double memory_fraction = 0;
    int compute = 0;
  };
  // kInit: the worker's settings (the front's, resolved at its start); the tenant's ledger's
  // memfd goes beside it.
  struct Init {
    std::string driver;
    bool device_printf_to_client = true;
    std::string server_name, backend_name;
    uint32_t max_message_bytes = 0;
    uint64_t max_bulk_bytes = 0;
    int64_t idle_timeout_ms = 0;
    int64_t read_spin_us = 0;
    bool shm_lane = true;
    uint64_t max_contexts = 0, max_streams = 0, max_handles = 0;
    uint64_t context_memory = 0;
    std::string tenant_name;
    bool tenant_open = false;  // an open server's default tenant (not named in the figures)
    Caps caps;
    uint32_t slot = 0;  // the worker's slot in the tenant's ledger
    std::string label;  // "worker 3 (tenant a)" for its log lines
    std::string log_level;
    bool borrow = false;  // the tenant may run past its compute cap on idle time
    // The GPUs whose schedules it shares (their memfd goes beside, after the ledger's), in the
    // memfd's order, and its record there; empty, -1: none.
    std::vector<int> schedule_devices;
    int32_t schedule_record = -1;
    // The tenant's SMs of its own on each GPU it has a partition on, where the front placed
    // them (sm_partition.h: SmShare): groups first .. first+count-1 of `step` SMs.
    struct Partition {
      int32_t device = 0;
      uint32_t sms = 0, step = 0, first = 0, count = 0;
    };
    std::vector<Partition> partitions;
  } init;
  // kOpen: a session past its Hello and admission; the client's socket, then its data lane's
  // memfd when `lane`, then its figures' memfd (SessionStats) when `stats`, go beside it.
  struct Open {
    uint64_t id = 0;
    uint64_t sequence = 0;  // the Hello's, answered by the worker's Welcome
    std::string client;     // "name[pid]", printable
    uint32_t pid = 0;
    std::string peer;
    int gpu = -1;
    std::vector<int> devices;
    bool lane = false;
    bool stats = false;
  } open;
  // kHostCalls: a host-call connection of session `session`, authenticated by the front; its
  // socket goes beside it.
  struct HostCalls {
    uint64_t id = 0;  // the connection's
    uint64_t sequence = 0;
    uint64_t session = 0;
    std::string key, client, peer;
  } host_calls;
  uint64_t id = 0;  // kDrain, kEvict: the session; kPing: echoed
  Caps caps;        // kCaps: the tenant's caps now (a reload, cuwire tenant set)
};

// What a worker tells the front.
struct FromWorker {
  enum class Kind { kReady, kEnded, kPong };
  Kind kind = Kind::kReady;
  std::string error;  // kReady: empty when the worker serves, else why it cannot
  uint64_t id = 0;    // kEnded: the session; kPong: the ping's
};

class WorkerChannel {
 public:
  // The most a message takes; descriptors beside one message.
  static constexpr size_t kMaxMessage = 64 << 10;
  static constexpr size_t kMaxFds = 4;

  // A connected pair: *front keeps one end (its sends never block), *worker_fd is the other
  // end's descriptor (close-on-exec: the spawn dup2s it onto the worker's descriptor 3).
  static Status pair(WorkerChannel* front, int* worker_fd);
  WorkerChannel() = default;
  explicit WorkerChannel(int fd, bool dont_wait = false) : fd_(fd), dont_wait_(dont_wait) {}
  ~WorkerChannel();
  WorkerChannel(WorkerChannel&& o) noexcept : fd_(o.fd_), dont_wait_(o.dont_wait_) { o.fd_ = -1; }
  WorkerChannel& operator=(WorkerChannel&& o) noexcept;

  bool valid() const { return fd_ >= 0; }

  Status send(const ToWorker& m, const std::vector<int>& fds = {});
  Status send(const FromWorker& m);
  // Blocks for the next message, up to `timeout` (negative: no bound; kFailed when nothing came
  // within it); kDisconnected once the other end is gone, kMalformed for a packet that is not
  // a message. Descriptors that came beside it are the caller's (*fds), at most kMaxFds; any
  // others are closed. Descriptors the receiver had no room for (out of descriptors) are
  // missing from *fds, the message itself still read: the caller refuses what needed them.
  Status receive(ToWorker* m, std::vector<int>* fds, std::chrono::milliseconds timeout);
  Status receive(FromWorker* m, std::chrono::milliseconds timeout);
  // Wakes a blocked receive on this end and makes the other end read end-of-stream.
  void shutdown();

 private:
  Status send_bytes(const std::vector<uint8_t>& bytes, const std::vector<int>& fds);
  Status receive_bytes(std::vector<uint8_t>* bytes, std::vector<int>* fds,
                       std::chrono::milliseconds timeout);
  int fd_ = -1;
  bool dont_wait_ = false;
};

}  // namespace cuwire::server
