// The metrics endpoint: GET /metrics over HTTP/1.1 on its own listener (gpu-server --metrics
// ADDR), answered with what `render` returns in the Prometheus text format (metrics.h). One
// request per connection, each bounded in size (8 KiB of request head) and time (5 s), served
// at most 8 at once, each on a thread of its own (more connections are closed at once): a
// client that stalls holds one of them for 5 s at most, and never touches a session.
//
// Thread-safety: start and the destructor from one thread; render runs on the endpoint's.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <thread>

#include "address.h"
#include "status.h"

namespace cuwire {
class Listener;
class Stream;
}

namespace cuwire::server {

class MetricsHttp {
 public:
  using Render = std::function<std::string()>;
  // `address`: tcp:HOST:PORT, or HOST:PORT.
  static Status start(const std::string& address, Render render, std::unique_ptr<MetricsHttp>* out);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;
  Address local_address() const;

 private:
  MetricsHttp() = default;
  void accept(std::unique_ptr<Stream> s);
  void serve(Stream& s);

  Render render_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // guarded by mu_: requests being answered
  std::unique_ptr<Listener> listener_;
  std::thread thread_;
};

// The answer to one HTTP request head (the bytes up to and including the blank line): the
// status line, headers and body. Public for tests.
std::string http_response(const std::string& head, const MetricsHttp::Render& render);

}  // namespace cuwire::server
