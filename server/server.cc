#include "server.h"

#include <spdlog/spdlog.h>

namespace cuwire::server {

Server::Server(ServerConfig config) : config_(std::move(config)) {}

Server::~Server() { stop(); }

Status Server::start() {
  if (config_.listen.empty()) return Status::invalid_argument("no --listen address given");
  if (config_.backend_override) {
    backend_.name = "override";
    backend_.why = "given by the embedding program";
    api_ = config_.backend_override;
  } else {
    if (Status s = make_backend(config_.backend, config_.sim, &backend_); !s) return s;
    api_ = backend_.api.get();
  }
  config_.session.backend_name = backend_.name;
  spdlog::info("backend: {} ({})", backend_.name, backend_.why);
  for (const Address& a : config_.listen) {
    std::unique_ptr<Listener> l;
    if (Status s = listen_on(a, config_.tls, &l); !s) {
      stop();
      return s;
    }
    listeners_.push_back(std::move(l));
  }
  for (auto& l : listeners_) {
    spdlog::info("listening on {}", l->local_address().to_string());
    listener_threads_.emplace_back([this, lp = l.get()] {
      lp->run([this](std::unique_ptr<Stream> s) { on_accept(std::move(s)); });
    });
  }
  return Status::ok();
}

void Server::on_accept(std::unique_ptr<Stream> stream) {
  reap_finished();
  std::lock_guard lock(mu_);
  if (stopping_) return;
  uint64_t id = next_session_id_++;
  auto session = std::make_unique<Session>(id, std::move(stream), config_.session, *api_);
  Session* raw = session.get();
  Live& live = sessions_[id];
  live.session = std::move(session);
  live.thread = std::thread([this, raw, id] {
    raw->run();
    std::lock_guard l(mu_);
    finished_.push_back(id);
  });
}

void Server::reap_finished() {
  std::vector<Live> done;
  {
    std::lock_guard lock(mu_);
    for (uint64_t id : finished_) {
      auto it = sessions_.find(id);
      if (it == sessions_.end()) continue;
      done.push_back(std::move(it->second));
      sessions_.erase(it);
    }
    finished_.clear();
  }
  for (auto& l : done) l.thread.join();
}

void Server::stop() {
  for (auto& l : listeners_) l->stop();
  for (auto& t : listener_threads_) t.join();
  listener_threads_.clear();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [id, live] : sessions_) live.session->stop();
  }
  std::vector<Live> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, live] : sessions_) all.push_back(std::move(live));
    sessions_.clear();
    finished_.clear();
  }
  for (auto& l : all) l.thread.join();
  listeners_.clear();
}

std::vector<Address> Server::addresses() const {
  std::vector<Address> out;
  for (auto& l : listeners_) out.push_back(l->local_address());
  return out;
}

size_t Server::session_count() const {
  std::lock_guard lock(mu_);
  return sessions_.size() - finished_.size();
}

}  // namespace cuwire::server
