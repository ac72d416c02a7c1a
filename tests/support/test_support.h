// Helpers shared by the protocol and server tests: an in-process gpu-server (TestServer), raw
// frames, a self-signed TLS certificate, and a log sink to count server log lines.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "protocol/transport.h"
#include "server/backend/backend.h"
#include "server/session/server.h"

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

// The environment variable `name`; empty when it is not set.
std::string env_or_empty(const char* name);

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
// `args` go on its command line besides; CUWIRE_TEST_ISOLATION=MODE in the test's environment
// adds --isolation MODE, so a suite's relay variant runs its sessions in worker processes
// (design decision 14).
class RelayServer {
 public:
  RelayServer(const std::string& gpu_server, const std::string& client_library,
              const Address& upstream, const TempDir& dir,
              const std::vector<std::string>& args = {});
  // The relay's own process id.
  int pid() const { return pid_; }
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
  // Sends `text`, then returns the line it prints in answer.
  std::string ask(const std::string& text) {
    send(text);
    return line();
  }
  // Its exit status (128 + signal when killed); closes its stdin first.
  int wait();
  // Sends it signal `sig` (SIGTERM: a server's drain).
  void signal(int sig);

 private:
  int pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

// What an in-process server (TestServer) is: options for what differs between suites. What
// they do not cover, a test sets in config() before start(). Every member has an initializer,
// so that designated initializers may leave any out (g++ warns of a member without one).
struct TestServerOptions {
  // Its listeners, in this order: kUnix a socket (s.sock) in the server's own directory, kTcp
  // and kTls 127.0.0.1 at a port the system picks. With a tls: listener the server presents a
  // self-signed certificate for localhost (TestServer::cert()).
  std::vector<Address::Kind> listen = {Address::Kind::kUnix};
  // The sim's GPUs (ServerConfig::sim): how many, and each one's memory and SMs; 0: the sim's
  // defaults. (Not a SimOptions member: g++ 12 misreads a designated initializer of one nested
  // here as leaving its string uninitialised.) The rest of SimOptions: config().sim (of a
  // server that makes its own sim).
  int gpus = 0;
  uint64_t memory_bytes = 0;
  int sm_count = 0;
  // A config file's text (server/ops/config_file.h): its tenants, admin token and
  // max_sessions_per_gpu. A text that does not parse fails start().
  std::string config{};
  // Placement of sessions on GPUs (server/tenancy/placement.h).
  std::string placement = "spread";
  // ServerConfig::metrics: "127.0.0.1:0" serves /metrics on a port the system picks.
  std::string metrics{};
  // Serve from this backend (not owned; it must outlive the server) instead of a sim.
  server::Backend* backend = nullptr;
  // Make the sim backend here (server::make_sim_backend(sim)) and serve from it, so that the
  // test can look into the device it serves (backend(): server::sim_used_bytes and the like).
  bool sim_in_test = false;
  // Non-empty: a relay (RelayServer: relay_gpu_server --backend cuda --driver relay_library)
  // in front of the server; address() and env() are then the relay's.
  std::string relay_library{}, relay_gpu_server{};
  // Further options for the relay's command line (a --config of its own, --isolation).
  std::vector<std::string> relay_args{};
  // Start in the constructor (a failure is a test failure, and ok() is false); false: the test
  // changes config() first and calls start() itself.
  bool start = true;
};

// The in-process gpu-server of every suite that needs one: a sim (or a backend of the test's)
// behind the listeners of TestServerOptions, in a temporary directory of its own, with a relay
// in front when asked. Stopped (relay first) at destruction.
class TestServer {
 public:
  explicit TestServer(const TestServerOptions& options = {});
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  // The configuration start() serves; a test may change it before then.
  server::ServerConfig& config() { return config_; }
  // The address of a listener of `kind` as TestServerOptions::listen makes it (before binding:
  // a tcp: or tls: port is 0), for a test that sets config().listen itself.
  Address listen_address(Address::Kind kind) const;
  // Starts a new server on config() (after stop(): at the same unix: addresses), then the relay
  // if one was asked for.
  Status start();
  // The relay (if any), then the server.
  void stop();
  // The last start() succeeded.
  bool ok() const { return status_.is_ok() && server_ != nullptr; }
  const Status& status() const { return status_; }

  // The server, once start() made it.
  server::Server& server() { return *server_; }
  server::Server* operator->() { return server_.get(); }
  // The backend it serves from where that is the test's (TestServerOptions::backend,
  // sim_in_test); null for a sim of the server's own.
  server::Backend* backend() const { return config_.backend_override; }
  // Where clients go: the relay, or the server's first listener as bound (tcp port resolved;
  // tls: host localhost, the name its certificate carries).
  const Address& address() const { return address_; }
  // The certificate a TLS client must trust (empty without a tls: listener).
  const std::string& cert() const { return cert_; }
  // A connection to address(), trusting cert().
  Status connect(std::unique_ptr<ByteStream>* out) const;
  // A child's environment for address() with `token`.
  std::vector<std::string> env(const std::string& token) const {
    return {"CUWIRE_SERVER=" + address_.to_string(), "CUWIRE_TOKEN=" + token};
  }
  // CUWIRE_SERVER of this process: cuwire's own libcuda.so.1, linked into the test, connects
  // to address().
  void export_address() const;
  // The relay in front (null without one).
  RelayServer* relay() { return relay_.get(); }
  // The server's own directory (its socket, certificate and relay live there).
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  TestServerOptions options_;
  server::ServerConfig config_;
  Status config_error_;  // the config text's, returned by start()
  // CUWIRE_TEST_RELAY=LIB:GPU_SERVER: a relay in front of this server, which has none of its
  // own; the config's tenants and admin token are then the relay's.
  std::string every_relay_library_, every_relay_gpu_server_;
  std::unique_ptr<server::Backend> sim_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<RelayServer> relay_;
  Status status_;
  Address address_;
  std::string cert_;
};

// A TestServer of one sim with `gpus` GPUs and the tenants (and [server] placement bounds) of
// a TOML config text, for clients that are child processes (and benchmarks/cap_bench).
class TenantServer : public TestServer {
 public:
  TenantServer(const std::string& toml, int gpus, const std::string& placement = "spread");
};

// The [[tenant]] tables of a compute mix: tenant i is named and tokened "t<i>", with
// `compute = caps[i]` unless that is 0 (uncapped), and `extra` (TOML lines) in every capped one.
std::string compute_mix(const std::vector<int>& caps, const std::string& extra = "");
std::vector<std::string> compute_mix_tokens(size_t n);

// Runs one saturating compute_probe (tests/server/compute_probe.c, at `probe`) per token at
// once on device 0, and returns the share of a `window_s`-second window each one's kernels ran,
// in percent, as the device's clock measured it.
std::vector<double> measure_shares(const std::string& probe, TestServer& s,
                                   const std::vector<std::string>& tokens, int window_s = 10);

// A cuArrayCreate descriptor: `width` x `height` (0: a one-dimensional array) elements of one
// channel of `format`.
CUDA_ARRAY_DESCRIPTOR array_descriptor(size_t width, size_t height, CUarray_format format);

// Names a transport-parameterised test's instances: unix, tcp, tls.
std::string kind_name(const ::testing::TestParamInfo<Address::Kind>& info);

// A connection to the server at `a` (trusting `cert` for a tls: address); null, and a test
// failure, when there is none. With a nonzero `deadline` its reads and writes give up that long
// from now, so that a server that fails to act fails the test rather than hanging it.
std::unique_ptr<ByteStream> dial(const Address& a,
                                 std::chrono::milliseconds deadline = std::chrono::seconds(10),
                                 const std::string& cert = "");
// `s` once its Hello (this build's, no token) was answered with Welcome; a test failure if not.
std::unique_ptr<ByteStream> welcomed(std::unique_ptr<ByteStream> s);
// The Error that answers a Hello with these fields (as handshake() sends them); a test failure
// if another answer comes.
ErrorMsg hello_refused(ByteStream& s, uint32_t version = kProtocolVersion, uint64_t manifest = 0,
                       const std::string& token = "");
// Reads the Error the server sends, then expects the server (not a deadline of s's) to have
// closed the connection.
ErrorMsg expect_error_and_close(ByteStream& s);

// Sends a frame of `type` with `message` bytes.
Status send_raw(ByteStream& s, FrameType type, const std::vector<uint8_t>& message,
                uint64_t sequence = 1, uint16_t flags = 0);
// Hello with the given fields; returns the server's answer frame.
Status handshake(ByteStream& s, Frame* answer, uint32_t version = kProtocolVersion,
                 uint64_t manifest = 0 /* 0: this build's */, const std::string& token = "");

}  // namespace cuwire::testing
