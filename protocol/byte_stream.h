// ByteStream: a connected, ordered, reliable byte stream (Unix socket, TCP, TLS, or an in-memory
// pair in tests). The one seam between the protocol and Asio: nothing that includes this
// header sees Asio or OpenSSL.
//
// Thread-safety: one thread may read while another writes, except on TLS streams, whose
// users serialise all operations (the client holds one lock per call; a server session is
// one thread).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "protocol/status.h"

namespace cuwire {

// Bounds on a stream's blocking operations (ByteStream::set_timeouts).
struct StreamTimeouts {
  using Clock = std::chrono::steady_clock;
  // An operation still waiting when this passes fails.
  Clock::time_point deadline = Clock::time_point::max();
  // An operation that moves no byte for this long fails; zero: no bound.
  std::chrono::milliseconds idle{0};

  bool bounded() const { return deadline != Clock::time_point::max() || idle.count() > 0; }
};

// Who is at the other end of a Unix socket, as the kernel recorded it when the peer connected
// (SO_PEERCRED): the peer cannot choose or change it.
struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
};

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Blocks until exactly `n` bytes are read. kDisconnected when the peer is gone before the
  // first byte; kMalformed when it closes part-way (a truncated message).
  virtual Status read_exact(void* buf, size_t n) = 0;
  // Blocks until at least one byte is there, then reads what is there, up to n bytes; *got is
  // how many. Fails as read_exact does (kDisconnected at end-of-stream).
  virtual Status read_some(void* buf, size_t n, size_t* got) = 0;
  // Before a read blocks, poll the stream for up to this long (an adaptive bound: halved after
  // a poll that found nothing, doubled back after one that did), so that an answer arriving
  // within microseconds costs no sleep and wake-up. Zero: never poll. A stream that cannot
  // poll ignores it.
  virtual void set_read_spin(std::chrono::microseconds) {}
  // Passes a file descriptor to the peer with one byte (SCM_RIGHTS), and takes one so passed:
  // Unix sockets only (kFailed elsewhere). receive_fd reads exactly that byte; *fd is -1 when
  // it came without a descriptor.
  virtual Status send_fd(int) { return Status::failed("descriptors pass over Unix sockets only"); }
  virtual Status receive_fd(int*) {
    return Status::failed("descriptors pass over Unix sockets only");
  }
  // Whether the peer has closed its end (without reading from the stream).
  virtual bool peer_closed() const { return false; }
  // Blocks until every byte of every piece is written, in order.
  virtual Status write_all(std::span<const std::span<const uint8_t>> pieces) = 0;
  // Half-close: the peer reads end-of-stream, while this side can still read its answer.
  virtual void close_write() = 0;
  // Wakes any blocked read/write with an error; further use fails. Safe from any thread.
  virtual void shutdown() = 0;
  // Wakes a blocked read with end-of-stream and fails later reads once the bytes already
  // received are read, while writes still work: for telling a peer why it is being let go.
  // Safe from any thread. A stream without separate directions shuts down both.
  virtual void shutdown_read() { shutdown(); }
  // Bounds every read and write (a TLS handshake included) from the next one on; the default
  // is no bound, and an unbounded stream pays nothing for timing. An operation past a bound
  // fails with kDisconnected, timed_out() turns true and the stream reads no more (after a
  // write timeout it writes no more either). Call it from the thread that uses the stream.
  // Streams over sockets implement it; an in-memory stream (tests) never blocks and ignores it.
  virtual void set_timeouts(const StreamTimeouts&) {}
  // True once an operation failed because of set_timeouts.
  virtual bool timed_out() const { return false; }
  // "unix:/path", "tcp:1.2.3.4:5678" — for log lines (a Unix peer accepted by a listener:
  // "unix:/path uid 1000 pid 4321").
  virtual std::string peer() const = 0;
  // A Unix socket's peer credentials; none over TCP, TLS and in-memory streams.
  virtual std::optional<PeerCredentials> peer_credentials() const { return std::nullopt; }
  // The socket under a plain unix: or tcp: stream, which another process may take over
  // (adopt_stream, transport.h) once this side stops using it; -1 for a stream that holds state
  // of its own (TLS) or has no socket.
  virtual int native_handle() const { return -1; }
  // Whether relay() works on this stream: one that holds state of its own (TLS), whose socket
  // cannot be handed to another process as it is.
  virtual bool relays() const { return false; }
  // Relays bytes both ways between this stream and the connected stream socket `fd` (taken),
  // so that another process can serve the connection over `fd`: until `fd`'s peer closes (what
  // it sent before reaches this stream's peer, and this stream stays open for a last word), or
  // this stream's peer closes or fails (then `fd` is shut for writing, and the relay goes on
  // until `fd`'s peer closes). kFailed at once where relays() is false.
  virtual Status relay(int fd) {
    ::close(fd);
    return Status::failed(peer() + ": this stream does not relay; its socket can be handed over");
  }
};

// A connected pair over socketpair(2), for tests.
struct StreamPair {
  std::unique_ptr<ByteStream> a, b;
};
StreamPair make_stream_pair();

}  // namespace cuwire
