#include "server/backend/cuda/stdout_capture.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace cuwire::server {
namespace {

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

Status StdoutCapture::acquire(std::shared_ptr<StdoutCapture>* out) {
  static std::mutex mu;
  static std::weak_ptr<StdoutCapture> current;
  std::lock_guard lock(mu);
  if (auto c = current.lock()) {
    *out = std::move(c);
    return Status::ok();
  }
  std::shared_ptr<StdoutCapture> c(new StdoutCapture());
  if (Status s = c->install(); !s) return s;
  current = c;
  *out = std::move(c);
  return Status::ok();
}

Status StdoutCapture::install() {
  // Device output is never made of these bytes: NULs around a random tag.
  std::random_device rd;
  marker_.assign(1, '\0');
  marker_ +=
      "\x1f"
      "cuwire-window-";
  for (int i = 0; i < 4; ++i) marker_ += std::to_string(rd());
  marker_ += '\0';
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Status::failed(std::string("device printf capture: pipe: ") + std::strerror(errno));
  }
  std::fflush(stdout);
  saved_fd_ = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (saved_fd_ < 0 || ::dup2(p[1], STDOUT_FILENO) < 0) {
    std::string why = std::strerror(errno);
    ::close(p[0]);
    ::close(p[1]);
    if (saved_fd_ >= 0) ::close(saved_fd_);
    saved_fd_ = -1;
    return Status::failed("device printf capture: cannot redirect stdout: " + why);
  }
  ::close(p[1]);
  read_fd_ = p[0];
  reader_ = std::thread([this] { read_loop(); });
  return Status::ok();
}

StdoutCapture::~StdoutCapture() {
  if (saved_fd_ < 0) return;
  std::fflush(stdout);
  // fd 1 was the pipe's only write end: the reader sees its end and stops.
  ::dup2(saved_fd_, STDOUT_FILENO);
  if (reader_.joinable()) reader_.join();
  ::close(read_fd_);
  ::close(saved_fd_);
}

void StdoutCapture::pass_marker() {
  // Everything written to fd 1 before the marker has been delivered once the reader sees it.
  std::unique_lock lock(mu_);
  marker_seen_ = false;
  lock.unlock();
  std::fflush(stdout);
  const bool sent = write_all(STDOUT_FILENO, marker_.data(), marker_.size());
  lock.lock();
  if (sent) cv_.wait(lock, [&] { return marker_seen_ || reader_done_; });
}

void StdoutCapture::open(std::string* text, size_t max_bytes, size_t* dropped) {
  // What was written before the window (and is still in the pipe) is not the window's.
  pass_marker();
  std::lock_guard lock(mu_);
  target_ = text;
  room_ = max_bytes > text->size() ? max_bytes - text->size() : 0;
  dropped_ = dropped;
}

void StdoutCapture::close() {
  pass_marker();
  std::lock_guard lock(mu_);
  target_ = nullptr;
  dropped_ = nullptr;
}

void StdoutCapture::deliver(const char* p, size_t n) {
  if (n == 0) return;
  {
    std::lock_guard lock(mu_);
    if (target_) {
      size_t take = std::min(n, room_);
      target_->append(p, take);
      room_ -= take;
      if (dropped_) *dropped_ += n - take;
      return;
    }
  }
  write_all(saved_fd_, p, n);
}

void StdoutCapture::read_loop() {
  std::string pending;
  char buf[64 << 10];
  for (;;) {
    ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (;;) {
      size_t at = pending.find(marker_);
      if (at == std::string::npos) break;
      deliver(pending.data(), at);
      pending.erase(0, at + marker_.size());
      std::lock_guard lock(mu_);
      marker_seen_ = true;
      cv_.notify_all();
    }
    // Keep only a tail that may be the start of a marker split across reads; text never is
    // (a marker starts with a NUL).
    size_t keep = 0;
    for (size_t k = std::min(pending.size(), marker_.size() - 1); k > 0; --k) {
      if (pending.compare(pending.size() - k, k, marker_, 0, k) == 0) {
        keep = k;
        break;
      }
    }
    deliver(pending.data(), pending.size() - keep);
    pending.erase(0, pending.size() - keep);
  }
  deliver(pending.data(), pending.size());
  std::lock_guard lock(mu_);
  reader_done_ = true;
  cv_.notify_all();
}

}  // namespace cuwire::server
