#include "server/ops/metrics_http.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <system_error>

#include "protocol/byte_stream.h"
#include "protocol/transport.h"

namespace cuwire::server {
namespace {

constexpr size_t kMaxHead = 8 << 10;
// Threads at most: the connections served, and evicted ones still ending (a shut-down stream
// ends its read or write at once, so these are brief), for a few addresses at once.
constexpr size_t kMaxThreads = 4 * MetricsHttp::kMaxConcurrent;
// Connections of one address, those closed and still ending included: a flood from one address
// holds no more threads than this, whatever the rest hold.
constexpr size_t kMaxPerPeer = MetricsHttp::kMaxConcurrent + MetricsHttp::kMaxConcurrent / 2;

std::string reply(const char* status, const char* type, const std::string& body, bool head) {
  std::string out = "HTTP/1.1 ";
  out += status;
  out += "\r\nContent-Type: ";
  out += type;
  out += "\r\nContent-Length: ";
  out += std::to_string(body.size());
  out += "\r\nConnection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

}  // namespace

std::string http_response(const std::string& head, const MetricsHttp::Render& render,
                          const MetricsHttp::Health& health) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos ||
      line.compare(sp2 + 1, 7, "HTTP/1.") != 0) {
    return reply("400 Bad Request", "text/plain", "bad request line\n", false);
  }
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return reply("405 Method Not Allowed", "text/plain", "only GET\n", false);
  }
  if (target == "/metrics") {
    return reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(), head_only);
  }
  if (target == "/healthz") {
    const std::string why = health ? health() : "";
    if (why.empty()) return reply("200 OK", "text/plain", "ok\n", head_only);
    return reply("503 Service Unavailable", "text/plain", why + "\n", head_only);
  }
  if (target == "/") {
    return reply("200 OK", "text/plain",
                 "cuwire gpu-server: metrics at /metrics, health at /healthz\n", head_only);
  }
  return reply("404 Not Found", "text/plain",
               "not found; metrics are at /metrics, health at /healthz\n", head_only);
}

Status MetricsHttp::start(const std::string& text, Render render, std::unique_ptr<MetricsHttp>* out,
                          Health health) {
  Address a;
  const std::string spec =
      text.find(':') != std::string::npos && text.compare(0, 4, "tcp:") != 0 ? "tcp:" + text : text;
  if (Status s = parse_address(spec, &a); !s) {
    return Status::invalid_argument("--metrics " + text + ": " + s.message());
  }
  if (a.kind != Address::Kind::kTcp) {
    return Status::invalid_argument("--metrics " + text + ": HOST:PORT or tcp:HOST:PORT");
  }
  std::unique_ptr<MetricsHttp> m(new MetricsHttp());
  m->render_ = std::move(render);
  m->health_ = std::move(health);
  if (Status s = listen_on(a, {}, &m->listener_); !s) {
    return Status::failed("--metrics " + text + ": " + s.message());
  }
  MetricsHttp* self = m.get();
  m->thread_ = std::thread([self] {
    self->listener_->run([self](std::unique_ptr<ByteStream> s) { self->accept(std::move(s)); },
                         [](const std::string& line) { spdlog::warn("metrics: {}", line); });
  });
  *out = std::move(m);
  return Status::ok();
}

MetricsHttp::~MetricsHttp() {
  if (listener_) listener_->stop();
  if (thread_.joinable()) thread_.join();
  // Requests under way end at once.
  std::unique_lock lock(mu_);
  for (auto& c : conns_) c->stream->shutdown();
  idle_.wait(lock, [&] { return conns_.empty(); });
}

bool MetricsHttp::evict_oldest_locked(const std::string* own) {
  std::map<std::string, size_t> held;
  for (auto& c : conns_) {
    if (!c->evicted) ++held[c->peer];
  }
  if (held.empty()) return false;
  const std::string peer =
      own ? *own : std::max_element(held.begin(), held.end(), [](auto& a, auto& b) {
                     return a.second < b.second;
                   })->first;
  Conn* victim = nullptr;
  for (auto& c : conns_) {
    if (c->evicted || c->peer != peer) continue;
    if (!c->head_read) {  // still sending its request: the first choice
      victim = c.get();
      break;
    }
    if (!victim) victim = c.get();
  }
  if (!victim) return false;
  victim->evicted = true;
  --active_;
  victim->stream->shutdown();
  return true;
}

void MetricsHttp::accept(std::unique_ptr<ByteStream> s) {
  auto conn = std::make_shared<Conn>();
  const std::string peer = s->peer();
  conn->peer = peer.substr(0, peer.rfind(':'));
  conn->stream = std::shared_ptr<ByteStream>(std::move(s));
  std::list<std::shared_ptr<Conn>>::iterator at;
  {
    std::lock_guard lock(mu_);
    // A new connection makes room from its own address's first (a scraper beside tricklers
    // of its host), else from the address that holds the most: a flood from one address
    // displaces its own connections, and holds at most kMaxPerPeer threads.
    size_t mine_open = 0, mine_all = 0;
    for (const auto& c : conns_) {
      if (c->peer != conn->peer) continue;
      ++mine_all;
      mine_open += !c->evicted;
    }
    const bool refused =
        mine_all >= kMaxPerPeer || conns_.size() >= kMaxThreads ||
        (active_ >= kMaxConcurrent && !evict_oldest_locked(mine_open > 0 ? &conn->peer : nullptr));
    if (refused) {
      conn->stream->shutdown();
      return;
    }
    ++active_;
    at = conns_.insert(conns_.end(), conn);
  }
  try {
    std::thread([this, conn, at]() mutable {
      serve(*conn);
      conn->stream->shutdown();
      std::lock_guard lock(mu_);
      if (!conn->evicted) --active_;
      conns_.erase(at);
      idle_.notify_all();
    }).detach();
  } catch (const std::system_error&) {  // no thread to be had: answer nothing
    std::lock_guard lock(mu_);
    if (!conn->evicted) --active_;
    conns_.erase(at);
  }
}

Address MetricsHttp::local_address() const { return listener_->local_address(); }

void MetricsHttp::serve(Conn& conn) {
  ByteStream& s = *conn.stream;
  StreamTimeouts t;
  t.deadline = StreamTimeouts::Clock::now() + kTimeout;
  s.set_timeouts(t);
  std::string head;
  char c = 0;
  while (head.size() < kMaxHead) {
    if (!s.read_exact(&c, 1)) return;  // gone, too slow, or closed to make room
    head += c;
    if (head.size() >= 4 && head.compare(head.size() - 4, 4, "\r\n\r\n") == 0) break;
  }
  {
    std::lock_guard lock(mu_);
    if (conn.evicted) return;
    conn.head_read = true;
  }
  std::string answer;
  if (head.size() >= kMaxHead) {
    answer =
        reply("431 Request Header Fields Too Large", "text/plain", "request too large\n", false);
  } else {
    try {
      answer = http_response(head, render_, health_);
    } catch (const std::exception& e) {
      spdlog::warn("metrics: rendering failed: {}", e.what());
      answer = reply("500 Internal Server Error", "text/plain", "rendering failed\n", false);
    }
  }
  const std::span<const uint8_t> piece(reinterpret_cast<const uint8_t*>(answer.data()),
                                       answer.size());
  (void)s.write_all({&piece, 1});
  s.close_write();
}

}  // namespace cuwire::server
