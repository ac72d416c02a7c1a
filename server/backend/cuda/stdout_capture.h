// Device printf on the cuda backend.
//
// The driver writes the printf output of a context's kernels to the process's stdout when a
// host thread synchronizes with them (in a relay, cuwire's client library does the same with
// the text its upstream sends). In gpu-server that stdout is the server's own, so the client
// would never see it. StdoutCapture routes the process's fd 1 through a pipe the server reads
// itself: a session's synchronizing call runs inside a window, and what is written to stdout
// during the window is that call's device output, sent back with its reply; whatever is written
// outside a window passes through to the real stdout.
//
// Windows are one at a time, process-wide, and a synchronizing call can block for as long as
// the kernels it waits on run, so only sessions that loaded code calling printf open them
// (SessionContext::may_print): other sessions never wait on a window.
//
// Thread-safety: all public functions are safe from any thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "protocol/status.h"

namespace cuwire::server {

class StdoutCapture {
 public:
  // The process's one capture, installed on first use (fd 1 becomes the pipe); it is removed,
  // fd 1 restored, when the last holder lets go.
  static Status acquire(std::shared_ptr<StdoutCapture>* out);
  ~StdoutCapture();
  StdoutCapture(const StdoutCapture&) = delete;
  StdoutCapture& operator=(const StdoutCapture&) = delete;

  // Runs fn() inside a window and appends what was written to stdout meanwhile to *text, up
  // to `max_bytes` in all (the rest is dropped, and *dropped counts it). Returns fn()'s value.
  template <class Fn>
  auto run(std::string* text, size_t max_bytes, size_t* dropped, Fn&& fn) {
    std::lock_guard window(window_mu_);
    open(text, max_bytes, dropped);
    struct Close {
      StdoutCapture* self;
      ~Close() { self->close(); }
    } closer{this};
    return fn();
  }

  // The real stdout, for what the server itself writes there.
  int real_stdout() const { return saved_fd_; }

 private:
  StdoutCapture() = default;
  Status install();
  // Writes the marker to fd 1 and waits until the reader has delivered everything before it.
  void pass_marker();
  void open(std::string* text, size_t max_bytes, size_t* dropped);
  void close();
  void read_loop();
  // Hands `n` bytes read from the pipe to the window or to the real stdout.
  void deliver(const char* p, size_t n);

  std::mutex window_mu_;  // held for a whole window
  int saved_fd_ = -1;     // the real stdout
  int read_fd_ = -1;      // the pipe's read end; fd 1 is its write end
  std::string marker_;    // written to fd 1 to end a window; never device output
  std::thread reader_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::string* target_ = nullptr;  // guarded by mu_: the open window's text
  size_t room_ = 0;                // guarded by mu_
  size_t* dropped_ = nullptr;      // guarded by mu_
  bool marker_seen_ = false;       // guarded by mu_
  bool reader_done_ = false;       // guarded by mu_
};

}  // namespace cuwire::server
