// The metrics endpoint: GET /metrics over HTTP/1.1 on its own listener (gpu-server --metrics
// ADDR), answered with what `render` returns in the Prometheus text format (metrics.h); and
// GET /healthz, for probes (a Kubernetes readiness or liveness probe, a load balancer): 200 "ok"
// while `health` returns nothing, 503 with its reason (draining) otherwise. One
// request per connection, each bounded in size (8 KiB of request head) and time (5 s from
// accept to the answer's last byte), served at most 8 at once, each on a thread of its own. A
// connection that comes while 8 are open takes the place of the oldest one still unfinished
// (preferring one still sending its request head), which is closed: clients that connect and
// say nothing, or send their request a byte at a time, cannot keep a scraper out, and a client
// that stalls never touches a session.
//
// Thread-safety: start and the destructor from one thread; render runs on the endpoint's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "protocol/address.h"
#include "protocol/status.h"

namespace cuwire {
class Listener;
class ByteStream;
}  // namespace cuwire

namespace cuwire::server {

class MetricsHttp {
 public:
  using Render = std::function<std::string()>;
  // Why the server is not serving now; empty while it is.
  using Health = std::function<std::string()>;
  // `address`: tcp:HOST:PORT, or HOST:PORT. No `health`: always healthy.
  static Status start(const std::string& address, Render render, std::unique_ptr<MetricsHttp>* out,
                      Health health = {});
  // Requests served at once, and how long one may take.
  static constexpr int kMaxConcurrent = 8;
  static constexpr std::chrono::seconds kTimeout{5};
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;
  Address local_address() const;

 private:
  // One open connection.
  struct Conn {
    std::shared_ptr<ByteStream> stream;
    std::string peer;        // its address, without the port
    bool head_read = false;  // guarded by mu_: its request is in, its answer being made
    bool evicted = false;    // guarded by mu_: closed to make room; its thread is ending
  };
  MetricsHttp() = default;
  void accept(std::unique_ptr<ByteStream> s);
  void serve(Conn& c);
  // Closes the oldest unfinished connection, not closed yet, of address `own` (null: of the
  // address that holds the most; one still sending its request first): a peer that floods the
  // endpoint makes room from its own connections, not a scraper's. False when there is none.
  bool evict_oldest_locked(const std::string* own);  // needs mu_

  Render render_;
  Health health_;
  std::mutex mu_;
  std::condition_variable idle_;
  // Guarded by mu_: open connections, oldest first, until their thread ends; `active_` of them
  // are not evicted.
  std::list<std::shared_ptr<Conn>> conns_;
  int active_ = 0;
  std::unique_ptr<Listener> listener_;
  std::thread thread_;
};

// The answer to one HTTP request head (the bytes up to and including the blank line): the
// status line, headers and body. Public for tests.
std::string http_response(const std::string& head, const MetricsHttp::Render& render,
                          const MetricsHttp::Health& health = {});

}  // namespace cuwire::server
