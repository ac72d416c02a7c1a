// The shared-memory data lane (design decision 7): a client on the server's host offers, at
// Hello, a memfd that both map; the payload bytes of large copies then travel through it
// instead of the socket, one memcpy on each side, while the frames that describe them still go
// over the socket in order. Across hosts there is no lane and the bytes take the socket.
//
// The memfd holds a header page and two rings of kRingBytes: `up` carries client-to-server
// bytes, `down` server-to-client. Each ring has one producer and one consumer; a producer
// advances `produced` after writing, a consumer `consumed` after reading, and each wakes the
// other through a futex word when it waits. Calls run one at a time on a connection, so a
// ring's bytes are always those of the one copy in flight.
//
// The server trusts nothing in the lane (design decision 11): it keeps its own counters and
// only reads the peer's, clamped to what the ring can hold, so a peer scribbling on the header
// can at worst stall its own session; the memfd must be sealed against shrinking (a file cut
// under a mapping would fault the server), which attach() checks before mapping it.
//
// Thread-safety: one producer and one consumer thread per ring, in different processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "protocol/status.h"

namespace cuwire {

class ShmLane {
 public:
  static constexpr size_t kRingBytes = size_t{8} << 20;
  // Copies of at least this many bytes take the lane (smaller ones are cheaper inline).
  static constexpr uint64_t kMinCopyBytes = 1 << 20;

  // Asked while waiting for the peer (every few milliseconds): false gives up (the wait then
  // fails with kDisconnected).
  using KeepWaiting = std::function<bool()>;

  // Client: a new sealed memfd, mapped. *fd is the descriptor to send (the caller closes it).
  static Status create(std::unique_ptr<ShmLane>* out, int* fd);
  // Server: maps the memfd a client sent, after checking its seals and size. Takes fd.
  static Status attach(int fd, std::unique_ptr<ShmLane>* out);
  ~ShmLane();
  ShmLane(const ShmLane&) = delete;
  ShmLane& operator=(const ShmLane&) = delete;

  // Writes n bytes into the ring (the client's up, the server's down), waiting for room.
  // With src null, `fill(dst, len)` writes each piece in place instead.
  Status produce(bool up, const void* src, size_t n, const KeepWaiting& keep_waiting,
                 const std::function<void(uint8_t*, size_t)>& fill = nullptr);
  // Reads n bytes from the ring: into dst, or, with dst null, through `take(src, len)` for
  // each piece (null take: dropped).
  Status consume(bool up, void* dst, size_t n, const KeepWaiting& keep_waiting,
                 const std::function<void(const uint8_t*, size_t)>& take = nullptr);

  struct Header;

 private:
  ShmLane(uint8_t* base, size_t bytes) : base_(base), bytes_(bytes) {}
  struct RingView;
  RingView ring(bool up);
  // Moves n bytes through ring r from one end: the producer's or the consumer's (shm_lane.cc).
  template <typename Ready, typename Move>
  static Status step_through_ring(const RingView& r, bool producing, uint64_t* pos, size_t n,
                                  Ready&& ready, const KeepWaiting& keep_waiting, Move&& move);

  uint8_t* base_;
  size_t bytes_;
  // This side's own counters, never read back from the shared header.
  uint64_t produced_[2] = {0, 0};  // [up]
  uint64_t consumed_[2] = {0, 0};
};

}  // namespace cuwire
