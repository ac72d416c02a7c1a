// The gpu-server program itself: options refused at start with one clear line, insecure
// listeners refused unless allowed, the token from the environment, and SIGTERM draining the
// sessions (kGoingAway) before the process exits.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "protocol/messages.h"
#include "protocol/transport.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// gpu-server with `args`, its stdout and stderr in one file of `dir`.
class ServerProcess {
 public:
  ServerProcess(const TempDir& dir, std::vector<std::string> args,
                std::vector<std::string> env = {})
      : log_(dir.file("server.log")) {
    args.insert(args.begin(), CUWIRE_GPU_SERVER);
    // The environment, less any token, with `env` replacing variables of the same names.
    std::vector<std::string> envs = child_environment(env, {"CUWIRE_SERVER_TOKEN"});
    std::vector<char*> argv = spawn_strings(args), envp = spawn_strings(envs);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, CUWIRE_GPU_SERVER, &fa, nullptr, argv.data(), envp.data()) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The exit status, or -1 when it runs past `limit`.
  int wait(std::chrono::milliseconds limit = 20s) {
    for (auto end = Clock::now() + limit; Clock::now() < end; std::this_thread::sleep_for(10ms)) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return -1;
  }
  void signal(int sig) { kill(pid_, sig); }
  std::string output() const { return read_file(log_); }
  bool started() const { return pid_ > 0; }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

// Runs gpu-server with `args` to its end; expects exit status 2 and `needle` in its one line.
void expect_refused(std::vector<std::string> args, const std::string& needle) {
  TempDir dir;
  args.insert(args.begin(), {"--listen", "unix:" + dir.file("s.sock"), "--backend", "sim"});
  ServerProcess p(dir, args);
  ASSERT_TRUE(p.started());
  EXPECT_EQ(p.wait(), 2) << p.output();
  std::string out = p.output();
  EXPECT_NE(out.find(needle), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("s.sock")));
}

TEST(GpuServerCli, RefusesMeaninglessLimits) {
  expect_refused({"--max-sessions", "0"}, "--max-sessions must be between 1 and 65536");
  expect_refused({"--max-connections", "-3"}, "--max-connections must be between 1 and 65536");
  expect_refused({"--max-handshakes-per-peer", "1000000"}, "--max-handshakes-per-peer");
  expect_refused({"--max-connections", "4", "--max-sessions", "8"}, "is over --max-connections");
  expect_refused({"--handshake-timeout", "0"}, "--handshake-timeout must be between");
  expect_refused({"--idle-timeout", "5x"}, "--idle-timeout: bad duration unit");
  expect_refused({"--drain-timeout", "2h"}, "--drain-timeout must be at most 1h");
  expect_refused({"--token-file", "/nonexistent/token"}, "cannot read --token-file");
  expect_refused({"--token", "a", "--token-file", "/etc/hostname"}, "give the token once");
}

TEST(GpuServerCli, RefusesBadSocketModesAndGroups) {
  expect_refused({"--socket-mode", "0999"}, "--socket-mode: socket mode '0999' is not an octal");
  expect_refused({"--socket-group", "no-such-group-cuwire-test"},
                 "--socket-group: socket group 'no-such-group-cuwire-test' is not a group");
  TempDir dir;
  std::ofstream(dir.file("g.toml")) << "[server]\nsocket_group = \"no-such-group-cuwire-test\"\n";
  {
    ServerProcess p(dir, {"--check-config", dir.file("g.toml")});
    EXPECT_EQ(p.wait(), 2) << p.output();
    EXPECT_NE(p.output().find("g.toml:2: socket_group: socket group 'no-such-group-cuwire-test'"),
              std::string::npos)
        << p.output();
  }
  // A flag wins over the file.
  std::ofstream(dir.file("m.toml")) << "[server]\nsocket_mode = \"0660\"\n";
  expect_refused({"--config", dir.file("m.toml"), "--socket-mode", "8"},
                 "--socket-mode: socket mode '8'");
}

TEST(GpuServerCli, SimProfileIsOneOfTheListed) {
  expect_refused({"--sim-profile", "sm_99"},
                 "sim profile 'sm_99' (--sim-profile, [sim] profile) is not one of sm_75, "
                 "sm_90, sm_120, sm_121, next");
  TempDir dir;
  std::ofstream(dir.file("p.toml")) << "[sim]\nprofile = \"turing\"\n";
  expect_refused({"--config", dir.file("p.toml")},
                 "sim profile 'turing' (--sim-profile, [sim] profile) is not one of");
  ServerProcess help(dir, {"--help"});
  EXPECT_EQ(help.wait(), 0);
  for (const char* line : {"sm_75: compute capability 7.5", "sm_90: compute capability 9.0",
                           "sm_120: compute capability 12.0", "sm_121: compute capability 12.1",
                           "next: compute capability 13.0"}) {
    EXPECT_NE(help.output().find(line), std::string::npos) << line << "\n" << help.output();
  }
}

// gpu-server --backend cuda with `args` and `env`: exit status 1 and `needle` in the one line
// it writes.
void expect_cuda_refused(std::vector<std::string> args, const std::string& needle,
                         std::vector<std::string> env = {}) {
  TempDir dir;
  args.insert(args.begin(), {"--listen", "unix:" + dir.file("s.sock"), "--backend", "cuda"});
  ServerProcess p(dir, args, env);
  ASSERT_TRUE(p.started());
  EXPECT_EQ(p.wait(), 1) << p.output();
  std::string out = p.output();
  EXPECT_NE(out.find(needle), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(GpuServerCli, CudaBackendSaysWhatIsWrongWithItsDriver) {
  expect_cuda_refused({"--driver", "/nonexistent/libcuda.so.1"},
                      "cannot load the driver library /nonexistent/libcuda.so.1");
  expect_cuda_refused({"--driver", "libm.so.6"},
                      "libm.so.6 is not a CUDA driver library (it has no cuInit)");
  expect_cuda_refused({"--driver", FAKE_DRIVER_OLD},
                      "supports CUDA 11.8; the cuda backend needs a driver for CUDA 12.4 or newer");
  expect_cuda_refused({"--driver", FAKE_DRIVER_NOGPU},
                      "reports no usable GPU: cuInit: CUDA_ERROR_NO_DEVICE");
  expect_cuda_refused({"--driver", FAKE_DRIVER_ZERO}, "reports no GPU (cuDeviceGetCount: 0)");
  // cuwire's own library where the NVIDIA driver should be, without --driver: refused, not
  // turned into a relay by accident.
  const std::string lib_dir = std::filesystem::path(CUWIRE_CLIENT_LIBRARY).parent_path();
  expect_cuda_refused({}, "libcuda.so.1 on the library path is cuwire's client library",
                      {"LD_LIBRARY_PATH=" + lib_dir});
}

TEST(GpuServerCli, CheckConfigSaysWhatIsWrong) {
  TempDir dir;
  {
    std::ofstream(dir.file("good.toml")) << "[[tenant]]\nname = \"a\"\ntoken = \"t\"\n"
                                            "memory = \"1GiB\"\n";
    ServerProcess p(dir, {"--check-config", dir.file("good.toml")});
    EXPECT_EQ(p.wait(), 0) << p.output();
    EXPECT_NE(p.output().find("good.toml: good (1 tenants)"), std::string::npos) << p.output();
  }
  std::ofstream(dir.file("bad.toml")) << "[[tenant]]\nname = \"a\"\ntoken = \"t\"\n"
                                         "compute = 150\n";
  ServerProcess p(dir, {"--check-config", dir.file("bad.toml")});
  EXPECT_EQ(p.wait(), 2) << p.output();
  std::string out = p.output();
  EXPECT_NE(out.find("bad.toml:4: tenant 'a': compute must be a whole percent, 1 to 100"),
            std::string::npos)
      << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  // Beyond the file itself: a token file every user may read; a sim's GPUs that a cap, SM
  // partitions or a GPU index does not fit; memory caps adding up to more than a GPU (a
  // warning that explains, not a refusal).
  {
    std::ofstream(dir.file("open.token")) << "t\n";
    ::chmod(dir.file("open.token").c_str(), 0644);
    std::ofstream(dir.file("readable.toml"))
        << "[[tenant]]\nname = \"a\"\ntoken_file = \"" << dir.file("open.token") << "\"\n";
    ServerProcess r(dir, {"--check-config", dir.file("readable.toml")});
    EXPECT_EQ(r.wait(), 2) << r.output();
    EXPECT_NE(r.output().find("is readable by every user (mode 0644): chmod o-rwx"),
              std::string::npos)
        << r.output();
    ::chmod(dir.file("open.token").c_str(), 0640);
    ServerProcess ok(dir, {"--check-config", dir.file("readable.toml")});
    EXPECT_EQ(ok.wait(), 0) << ok.output();
  }
  const std::string sim = "[server]\nbackend = \"sim\"\n[sim]\ngpus = 2\nmemory = \"4GiB\"\n";
  auto check = [&](const std::string& name, const std::string& tenants, int rc,
                   const std::string& says) {
    std::ofstream(dir.file(name)) << sim << tenants;
    ServerProcess c(dir, {"--check-config", dir.file(name)});
    EXPECT_EQ(c.wait(), rc) << name << ": " << c.output();
    EXPECT_NE(c.output().find(says), std::string::npos) << name << ": " << c.output();
  };
  check("big.toml", "[[tenant]]\nname = \"a\"\ntoken = \"t\"\nmemory = \"6GiB\"\n", 2,
        "tenant 'a': memory cap 6 GiB is more than a GPU's 4 GiB");
  check("gpu.toml", "[[tenant]]\nname = \"a\"\ntoken = \"t\"\ngpus = [2]\n", 2,
        "gpus names GPU 2; the sim has 2 (0 to 1)");
  check("sms.toml",
        "[[tenant]]\nname = \"a\"\ntoken = \"t\"\nsms = 30\n"
        "[[tenant]]\nname = \"b\"\ntoken = \"u\"\nsms = 20\ngpus = [1]\n",
        2, "the tenants' sms on GPU 1 add up to 50 of its 40 SMs");
  check("over.toml",
        "[[tenant]]\nname = \"a\"\ntoken = \"t\"\nmemory = \"3GiB\"\n"
        "[[tenant]]\nname = \"b\"\ntoken = \"u\"\nmemory = 0.5\ngpus = [0]\n",
        0,
        "warning: the memory caps of the tenants that may use GPU 0 (a, b) add up to 5 GiB "
        "of its 4 GiB");
  // --config with the same file refuses to start, with the same line.
  ServerProcess q(dir,
                  {"--config", dir.file("bad.toml"), "--listen", "unix:" + dir.file("s.sock")});
  EXPECT_EQ(q.wait(), 2) << q.output();
  EXPECT_NE(q.output().find("bad.toml:4:"), std::string::npos) << q.output();
}

TEST(GpuServerCli, RefusesInsecureNetworkListeners) {
  TempDir dir;
  {
    ServerProcess p(dir, {"--listen", "tcp:0.0.0.0:0", "--backend", "sim"});
    EXPECT_EQ(p.wait(), 2) << p.output();
    EXPECT_NE(p.output().find("--allow-insecure"), std::string::npos) << p.output();
  }
  ServerProcess p(dir, {"--listen", "tcp:0.0.0.0:0", "--backend", "sim", "--allow-insecure",
                        "--ready-file", dir.file("ready")});
  for (auto end = Clock::now() + 20s;
       !std::filesystem::exists(dir.file("ready")) && Clock::now() < end;) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(std::filesystem::exists(dir.file("ready"))) << p.output();
  EXPECT_NE(p.output().find("in the clear"), std::string::npos) << p.output();
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.output();
}

TEST(GpuServerCli, HelpNamesTheLimits) {
  TempDir dir;
  ServerProcess p(dir, {"--help"});
  EXPECT_EQ(p.wait(), 0);
  std::string out = p.output();
  for (const char* opt : {"--max-connections", "--max-sessions", "--max-handshakes-per-peer",
                          "--handshake-timeout", "--idle-timeout", "--drain-timeout",
                          "--token-file", "--allow-insecure", "CUWIRE_SERVER_TOKEN"}) {
    EXPECT_NE(out.find(opt), std::string::npos) << opt << "\n" << out;
  }
}

// SIGTERM: the session is told kGoingAway and closed, the socket file goes, the process exits 0.
// --backend auto without a usable driver serves the sim, and says so as a warning.
TEST(GpuServerCli, AutoFallingBackToTheSimWarns) {
  TempDir dir;
  ServerProcess p(dir, {"--listen", "unix:" + dir.file("s.sock"), "--backend", "auto", "--driver",
                        FAKE_DRIVER_NOGPU, "--ready-file", dir.file("ready")});
  for (auto end = Clock::now() + 20s;
       !std::filesystem::exists(dir.file("ready")) && Clock::now() < end;) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(std::filesystem::exists(dir.file("ready"))) << p.output();
  const std::string out = p.output();
  EXPECT_NE(out.find("warning gpu-server: backend: auto found no usable GPU driver"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("serving the simulated GPU"), std::string::npos) << out;
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.output();
}

TEST(GpuServerCli, SigtermDrainsSessions) {
  TempDir dir;
  std::string sock = dir.file("s.sock");
  ServerProcess p(dir,
                  {"--listen", "unix:" + sock, "--backend", "sim", "--ready-file",
                   dir.file("ready"), "--drain-timeout", "5s"},
                  {"CUWIRE_SERVER_TOKEN=from-env"});
  for (auto end = Clock::now() + 20s;
       !std::filesystem::exists(dir.file("ready")) && Clock::now() < end;) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(std::filesystem::exists(dir.file("ready"))) << p.output();
  Address a;
  ASSERT_TRUE(parse_address("unix:" + sock, &a).is_ok());
  std::unique_ptr<ByteStream> s = dial(a, 20s);
  ASSERT_TRUE(s);
  Frame f;
  ASSERT_TRUE(handshake(*s, &f, kProtocolVersion, 0, "from-env").is_ok());
  ASSERT_EQ(f.type(), FrameType::kWelcome) << p.output();
  p.signal(SIGTERM);
  ASSERT_TRUE(read_frame(*s, FrameLimits{}, &f).is_ok()) << p.output();
  ASSERT_EQ(f.type(), FrameType::kError);
  ErrorMsg e;
  ASSERT_TRUE(decode_error(f, &e).is_ok());
  EXPECT_EQ(e.kind, ErrorKind::kGoingAway);
  EXPECT_EQ(p.wait(), 0) << p.output();
  EXPECT_FALSE(std::filesystem::exists(sock));
  EXPECT_NE(p.output().find("drained"), std::string::npos) << p.output();
}

}  // namespace
}  // namespace cuwire::testing
