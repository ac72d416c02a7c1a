// Stream: a connected, ordered, reliable byte stream (Unix socket, TCP, TLS, or an in-memory
// pair in tests). The one seam between the protocol and Asio: nothing that includes this
// header sees Asio or OpenSSL.
//
// Thread-safety: one thread may read while another writes, except on TLS streams, whose
// users serialise all operations (the client holds one lock per call; a server session is
// one thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "status.h"

namespace cuwire {

class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks until exactly `n` bytes are read. kDisconnected when the peer is gone before the
  // first byte; kMalformed when it closes part-way (a truncated message).
  virtual Status read_exact(void* buf, size_t n) = 0;
  // Blocks until every byte of every piece is written, in order.
  virtual Status write_all(std::span<const std::span<const uint8_t>> pieces) = 0;
  // Half-close: the peer reads end-of-stream, while this side can still read its answer.
  virtual void close_write() = 0;
  // Wakes any blocked read/write with an error; further use fails. Safe from any thread.
  virtual void shutdown() = 0;
  // "unix:/path", "tcp:1.2.3.4:5678" — for log lines.
  virtual std::string peer() const = 0;
};

// A connected pair over socketpair(2), for tests.
struct StreamPair {
  std::unique_ptr<Stream> a, b;
};
StreamPair make_stream_pair();

}  // namespace cuwire
