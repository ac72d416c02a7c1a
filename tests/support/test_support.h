// Helpers shared by the protocol and server tests: an in-process gpu-server, raw frames, a
// self-signed TLS certificate, and a log sink to count server log lines.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "server/session/server.h"
#include "protocol/transport.h"

namespace cuwire::testing {

// A fresh temporary directory, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes a self-signed EC certificate for "localhost" and 127.0.0.1 (cert.pem, key.pem).
void make_self_signed_cert(const std::string& cert_path, const std::string& key_path);

// Captures everything spdlog's default logger writes while alive. Server threads may still be
// inside a log call through the capturing logger when the capture ends, so the logger and its
// text are kept for the life of the process.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::string text() const { return out_->str(); }
  // Lines containing `needle`.
  int count(const std::string& needle) const;

 private:
  std::shared_ptr<std::ostringstream> out_;
  std::shared_ptr<spdlog::logger> saved_;
};

// A file's whole contents, byte for byte; empty when it cannot be read.
std::string read_file(const std::string& path);

// This process's environment for a child: `set` entries ("NAME=value") replace the variables of
// those names, and variables named in `unset` are left out.
std::vector<std::string> child_environment(const std::vector<std::string>& set,
                                           const std::vector<std::string>& unset = {});
// argv or envp for posix_spawn: pointers into `v`, then a null.
std::vector<char*> spawn_strings(std::vector<std::string>& v);

// A relay (design decision 12) as a child process: `gpu_server --backend cuda --driver
// client_library` on a unix socket in `dir`, relaying to `upstream`. ok() once it serves;
// stopped (SIGTERM, then waited for) at destruction. A child, not in-process: the relay's driver
// is cuwire's client library, whose one connection per process a test's own calls may use.
class RelayServer {
 public:
  RelayServer(const std::string& gpu_server, const std::string& client_library,
              const Address& upstream, const TempDir& dir);
  ~RelayServer();
  bool ok() const { return pid_ > 0 && !address_.to_string().empty(); }
  const Address& address() const { return address_; }
  // The relay's log so far.
  std::string log() const;

 private:
  int pid_ = -1;
  Address address_;
  std::string log_path_;
};

// A child process with its stdin and stdout on pipes (stderr is the test's). `env` entries
// ("NAME=value") replace the test's own variables of those names. The destructor closes its
// stdin and waits for it.
class ChildProcess {
 public:
  ChildProcess(const std::string& path, const std::vector<std::string>& args,
               const std::vector<std::string>& env = {});
  ~ChildProcess();
  bool started() const { return pid_ > 0; }
  // The next line it prints, without the newline; empty at its end.
  std::string line();
  // Everything it prints from here to its end.
  std::string rest();
  void send(const std::string& text);
  // Its exit status (128 + signal when killed); closes its stdin first.
  int wait();
  // Sends it signal `sig` (SIGTERM: a server's drain).
  void signal(int sig);

 private:
  int pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

// An in-process sim server on a Unix socket with the tenants (and [server] placement bounds)
// of a TOML config text, for clients that are child processes.
class TenantServer {
 public:
  TenantServer(const std::string& toml, int gpus, const std::string& placement = "spread");
  std::vector<std::string> env(const std::string& token) const {
    return {"CUWIRE_SERVER=" + address_.to_string(), "CUWIRE_TOKEN=" + token};
  }
  server::Server& server() { return *server_; }

 private:
  TempDir dir_;
  Address address_;
  std::unique_ptr<server::Server> server_;
};

// The [[tenant]] tables of a compute mix: tenant i is named and tokened "t<i>", with
// `compute = caps[i]` unless that is 0 (uncapped), and `extra` (TOML lines) in every capped one.
std::string compute_mix(const std::vector<int>& caps, const std::string& extra = "");
std::vector<std::string> compute_mix_tokens(size_t n);

// Runs one saturating compute_probe (tests/server/compute_probe.c, at `probe`) per token at
// once on device 0, and returns the share of a `window_s`-second window each one's kernels ran,
// in percent, as the device's clock measured it.
std::vector<double> measure_shares(const std::string& probe, TenantServer& s,
                                   const std::vector<std::string>& tokens, int window_s = 10);

// Names a transport-parameterised test's instances: unix, tcp, tls.
std::string kind_name(const ::testing::TestParamInfo<Address::Kind>& info);

// Sends a frame of `type` with `message` bytes.
Status send_raw(ByteStream& s, FrameType type, const std::vector<uint8_t>& message,
                uint64_t sequence = 1, uint16_t flags = 0);
// Hello with the given fields; returns the server's answer frame.
Status handshake(ByteStream& s, Frame* answer, uint32_t version = kProtocolVersion,
                 uint64_t manifest = 0 /* 0: this build's */, const std::string& token = "");

}  // namespace cuwire::testing
