#include "tests/support/test_support.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "server/backend/sim/sim_backend.h"
#include "server/ops/config_file.h"

namespace cuwire::testing {

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("cuwire-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void make_self_signed_cert(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (!key) throw std::runtime_error("EC key generation failed");
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"},
                            std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, key, EVP_sha256());
  FILE* f = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
}

namespace {
// Capturing loggers and their text, never freed (a few per test).
struct RetiredCapture {
  std::shared_ptr<std::ostringstream> text;
  std::shared_ptr<spdlog::logger> logger;
};
std::mutex g_retired_mu;
std::vector<RetiredCapture>* g_retired = new std::vector<RetiredCapture>;
}  // namespace

LogCapture::LogCapture()
    : out_(std::make_shared<std::ostringstream>()), saved_(spdlog::default_logger()) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*out_);
  auto logger = std::make_shared<spdlog::logger>("capture", sink);
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  std::lock_guard lock(g_retired_mu);
  g_retired->push_back({out_, logger});
}

LogCapture::~LogCapture() { spdlog::set_default_logger(saved_); }

int LogCapture::count(const std::string& needle) const {
  std::istringstream in(out_->str());
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

std::string kind_name(const ::testing::TestParamInfo<Address::Kind>& info) {
  switch (info.param) {
    case Address::Kind::kUnix:
      return "unix";
    case Address::Kind::kTcp:
      return "tcp";
    case Address::Kind::kTls:
      return "tls";
  }
  return "?";
}

Status send_raw(ByteStream& s, FrameType type, const std::vector<uint8_t>& message,
                uint64_t sequence, uint16_t flags) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.flags = flags;
  h.sequence = sequence;
  return write_frame(s, h, message);
}

Status handshake(ByteStream& s, Frame* answer, uint32_t version, uint64_t manifest,
                 const std::string& token) {
  HelloMsg hello;
  hello.protocol_version = version;
  hello.manifest_hash = manifest ? manifest : kManifestHash;
  hello.client_name = "test";
  hello.pid = static_cast<uint32_t>(getpid());
  hello.token = token;
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  if (Status st = send_raw(s, FrameType::kHello, msg); !st) return st;
  return read_frame(s, FrameLimits{}, answer);
}

std::unique_ptr<ByteStream> dial(const Address& a, std::chrono::milliseconds deadline,
                                 const std::string& cert) {
  std::unique_ptr<ByteStream> s;
  Status st = connect_stream(a, {cert}, &s);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!s || deadline.count() == 0) return s;
  StreamTimeouts t;
  t.deadline = StreamTimeouts::Clock::now() + deadline;
  s->set_timeouts(t);
  return s;
}

std::unique_ptr<ByteStream> welcomed(std::unique_ptr<ByteStream> s) {
  if (!s) return s;
  Frame f;
  Status st = handshake(*s, &f);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(f.type(), FrameType::kWelcome);
  return s;
}

ErrorMsg hello_refused(ByteStream& s, uint32_t version, uint64_t manifest,
                       const std::string& token) {
  Frame f;
  ErrorMsg e;
  Status st = handshake(s, &f, version, manifest, token);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(f.type(), FrameType::kError);
  EXPECT_TRUE(decode_error(f, &e).is_ok());
  return e;
}

ErrorMsg expect_error_and_close(ByteStream& s) {
  Frame f;
  Status st = read_frame(s, FrameLimits{}, &f);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(f.type(), FrameType::kError);
  ErrorMsg e;
  EXPECT_TRUE(decode_error(f, &e).is_ok());
  Frame after;
  Status closed = read_frame(s, FrameLimits{}, &after);
  EXPECT_FALSE(closed.is_ok()) << "connection still open";
  EXPECT_FALSE(s.timed_out()) << "the server did not close the connection";
  return e;
}

CUDA_ARRAY_DESCRIPTOR array_descriptor(size_t width, size_t height, CUarray_format format) {
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Format = format;
  d.NumChannels = 1;
  return d;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string env_or_empty(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

std::vector<std::string> child_environment(const std::vector<std::string>& set,
                                           const std::vector<std::string>& unset) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string var(*e);
    std::string name = var.substr(0, var.find('='));
    bool drop = std::find(unset.begin(), unset.end(), name) != unset.end();
    for (const auto& x : set) drop = drop || x.rfind(name + "=", 0) == 0;
    if (!drop) out.push_back(var);
  }
  out.insert(out.end(), set.begin(), set.end());
  return out;
}

std::vector<char*> spawn_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

RelayServer::RelayServer(const std::string& gpu_server, const std::string& client_library,
                         const Address& upstream, const TempDir& dir,
                         const std::vector<std::string>& extra) {
  const std::string sock = dir.file("relay.sock"), ready = dir.file("relay.ready");
  log_path_ = dir.file("relay.log");
  std::vector<std::string> args = {gpu_server, "--listen",     "unix:" + sock, "--backend", "cuda",
                                   "--driver", client_library, "--ready-file", ready};
  args.insert(args.end(), extra.begin(), extra.end());
  const std::string isolation = env_or_empty("CUWIRE_TEST_ISOLATION");
  if (!isolation.empty() && std::find(extra.begin(), extra.end(), "--isolation") == extra.end()) {
    args.insert(args.end(), {"--isolation", isolation});
  }
  std::vector<std::string> env = child_environment({"CUWIRE_SERVER=" + upstream.to_string()});
  std::vector<char*> argv = spawn_strings(args), envp = spawn_strings(env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, gpu_server.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return;
  pid_ = pid;
  for (int i = 0; i < 300; ++i) {
    if (std::ifstream(ready).good()) {
      parse_address("unix:" + sock, &address_);
      return;
    }
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

RelayServer::~RelayServer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
}

std::string RelayServer::log() const { return read_file(log_path_); }

ChildProcess::ChildProcess(const std::string& path, const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0) return;
  if (pipe(from_child) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return;
  }
  std::vector<std::string> env_text = child_environment(env);
  std::vector<std::string> argv_text = {path};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv = spawn_strings(argv_text), envp = spawn_strings(env_text);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  posix_spawn_file_actions_addclose(&fa, to_child[1]);
  posix_spawn_file_actions_addclose(&fa, from_child[0]);
  pid_t pid = -1;
  if (posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), envp.data()) == 0) pid_ = pid;
  posix_spawn_file_actions_destroy(&fa);
  close(to_child[0]);
  close(from_child[1]);
  in_ = fdopen(to_child[1], "w");
  out_ = fdopen(from_child[0], "r");
}

ChildProcess::~ChildProcess() {
  wait();
  if (out_) fclose(out_);
}

std::string ChildProcess::line() {
  char buf[512];
  if (!out_ || !std::fgets(buf, sizeof buf, out_)) return "";
  std::string s(buf);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string ChildProcess::rest() {
  std::string s;
  char buf[4096];
  size_t n = 0;
  while (out_ && (n = std::fread(buf, 1, sizeof buf, out_)) > 0) s.append(buf, n);
  return s;
}

void ChildProcess::send(const std::string& text) {
  if (!in_) return;
  std::fputs(text.c_str(), in_);
  std::fflush(in_);
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int ChildProcess::wait() {
  if (in_) {
    fclose(in_);
    in_ = nullptr;
  }
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---------------------------------------------------------------------------------------------
// The in-process server

Address TestServer::listen_address(Address::Kind kind) const {
  Address a;
  switch (kind) {
    case Address::Kind::kUnix:
      parse_address("unix:" + dir_.file("s.sock"), &a);
      break;
    case Address::Kind::kTcp:
      parse_address("tcp:127.0.0.1:0", &a);
      break;
    case Address::Kind::kTls:
      parse_address("tls:127.0.0.1:0", &a);
      break;
  }
  return a;
}

TestServer::TestServer(const TestServerOptions& options) : options_(options) {
  for (Address::Kind kind : options.listen) {
    config_.listen.push_back(listen_address(kind));
    if (kind == Address::Kind::kTls && cert_.empty()) {
      cert_ = dir_.file("cert.pem");
      make_self_signed_cert(cert_, dir_.file("key.pem"));
      config_.tls = {cert_, dir_.file("key.pem")};
    }
  }
  config_.backend = "sim";
  if (options.gpus) config_.sim.gpus = options.gpus;
  if (options.memory_bytes) config_.sim.memory_bytes = options.memory_bytes;
  if (options.sm_count) config_.sim.sm_count = options.sm_count;
  config_.metrics = options.metrics;
  if (options.sim_in_test) {
    sim_ = server::make_sim_backend(config_.sim);
    config_.backend_override = sim_.get();
  } else {
    config_.backend_override = options.backend;
  }
  if (const std::string every = env_or_empty("CUWIRE_TEST_RELAY");
      options.relay_library.empty() && every.find(':') != std::string::npos) {
    every_relay_library_ = every.substr(0, every.find(':'));
    every_relay_gpu_server_ = every.substr(every.find(':') + 1);
  }
  if (!options.config.empty()) {
    server::FileConfig file;
    config_error_ = server::parse_config(options.config, "tenants.toml", &file);
    // Behind an every-test relay the tenants are the relay's (start() writes them into its
    // config file), and the server behind it is open to the relay.
    if (every_relay_library_.empty()) {
      config_.tenants = file.tenants;
      config_.session.admin_token_sha256 = file.admin_token_sha256;
      config_.max_sessions_per_gpu = static_cast<int>(file.max_sessions_per_gpu.value_or(0));
      config_.open = file.open.value_or(true);
    }
  }
  if (config_error_.is_ok() && !server::parse_placement(options.placement, &config_.placement)) {
    config_error_ = Status::invalid_argument("placement '" + options.placement + "'");
  }
  status_ = Status::failed("not started");
  if (options.start) {
    const Status s = start();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
}

TestServer::~TestServer() { stop(); }

Status TestServer::start() {
  stop();
  server_.reset();
  status_ = config_error_;
  if (!status_) return status_;
  server_ = std::make_unique<server::Server>(config_);
  status_ = server_->start();
  if (!status_) return status_;
  address_ = server_->addresses().at(0);
  if (address_.kind == Address::Kind::kTls) address_.host = "localhost";
  // CUWIRE_TEST_RELAY=LIB:GPU_SERVER puts a relay in front of every test server that has none
  // (a suite's worker variant, with CUWIRE_TEST_ISOLATION), with the config's tenants.
  std::string library = options_.relay_library, gpu_server = options_.relay_gpu_server;
  std::vector<std::string> args = options_.relay_args;
  if (library.empty() && !every_relay_library_.empty()) {
    library = every_relay_library_;
    gpu_server = every_relay_gpu_server_;
    if (!options_.config.empty()) {
      std::ofstream(dir_.file("relay.toml")) << options_.config;
      args.insert(args.end(), {"--config", dir_.file("relay.toml")});
    }
  }
  if (!library.empty()) {
    relay_ = std::make_unique<RelayServer>(gpu_server, library, address_, dir_, args);
    if (!relay_->ok()) {
      status_ = Status::failed("the relay did not start: " + relay_->log());
      return status_;
    }
    address_ = relay_->address();
  }
  return status_;
}

void TestServer::stop() {
  relay_.reset();
  if (server_) server_->stop();
}

Status TestServer::connect(std::unique_ptr<ByteStream>* out) const {
  return connect_stream(address_, {cert_}, out);
}

void TestServer::export_address() const {
  setenv("CUWIRE_SERVER", address_.to_string().c_str(), 1);
}

namespace {
TestServerOptions tenant_server(const std::string& toml, int gpus, const std::string& placement) {
  TestServerOptions o;
  o.gpus = gpus;
  o.config = toml;
  o.placement = placement;
  return o;
}
}  // namespace

TenantServer::TenantServer(const std::string& toml, int gpus, const std::string& placement)
    : TestServer(tenant_server(toml, gpus, placement)) {}

std::string compute_mix(const std::vector<int>& caps, const std::string& extra) {
  std::string toml;
  for (size_t i = 0; i < caps.size(); ++i) {
    // Appended piece by piece: g++ 12 warns (-Wrestrict) on a chain of string + literal.
    const std::string name = std::to_string(i);
    toml.append("[[tenant]]\nname = \"t").append(name).append("\"\ntoken = \"t");
    toml.append(name).append("\"\n");
    if (caps[i])
      toml.append("compute = ").append(std::to_string(caps[i])).append("\n").append(extra);
  }
  return toml;
}

std::vector<std::string> compute_mix_tokens(size_t n) {
  std::vector<std::string> tokens;
  for (size_t i = 0; i < n; ++i) tokens.push_back(std::string("t").append(std::to_string(i)));
  return tokens;
}

std::vector<double> measure_shares(const std::string& probe, TestServer& s,
                                   const std::vector<std::string>& tokens, int window_s) {
  auto wall_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_REALTIME, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  };
  const uint64_t second = 1000000000ull;
  const uint64_t start = wall_ns() + 3 * second;  // time for every probe to connect and load
  const uint64_t from = start + second, to = from + window_s * second, end = to + second;
  std::vector<std::unique_ptr<ChildProcess>> probes;
  for (const std::string& t : tokens) {
    probes.push_back(std::make_unique<ChildProcess>(
        probe,
        std::vector<std::string>{"2000", std::to_string(start), std::to_string(end),
                                 std::to_string(from), std::to_string(to)},
        s.env(t)));
  }
  std::vector<double> out;
  for (auto& p : probes) {
    const std::string line = p->line();
    unsigned long long busy = 0;
    int kernels = 0;
    EXPECT_EQ(std::sscanf(line.c_str(), "busy_ns %llu kernels %d", &busy, &kernels), 2) << line;
    EXPECT_EQ(p->wait(), 0);
    out.push_back(100.0 * static_cast<double>(busy) / static_cast<double>(to - from));
  }
  return out;
}

}  // namespace cuwire::testing
