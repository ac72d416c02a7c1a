// Isolation by process (design decision 14, server/worker/): the channel between the front and
// its workers, the tenants' ledgers shared between processes, and a front whose sessions run in
// worker processes. The front is gpu-server on the cuda backend over cuwire's own client library
// (a relay) in front of an in-process sim, so a worker runs the cuda backend's path; clients are
// processes (cap_probe, hold_probe).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/session/server.h"
#include "server/worker/channel.h"
#include "server/worker/ledger.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using json = nlohmann::json;
using server::FromWorker;
using server::TenantLedger;
using server::ToWorker;
using server::WorkerChannel;

constexpr uint64_t kMiB = 1ull << 20;

// How a worker that took SIGSEGV ended, as the front reports it: under AddressSanitizer, which
// takes the signal itself, reports it and exits with status 1.
#if defined(__SANITIZE_ADDRESS__)
constexpr char kSegvEnd[] = "exited with status 1";
#else
constexpr char kSegvEnd[] = "killed by signal 11 (SIGSEGV)";
#endif

// ---- the channel

TEST(WorkerChannel, CarriesMessagesAndDescriptors) {
  WorkerChannel front;
  int worker_fd = -1;
  ASSERT_TRUE(WorkerChannel::pair(&front, &worker_fd).is_ok());
  WorkerChannel worker(worker_fd);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ToWorker m;
  m.kind = ToWorker::Kind::kOpen;
  m.open.id = 42;
  m.open.sequence = 7;
  m.open.client = "prog[12]";
  m.open.pid = 12;
  m.open.peer = "unix:/x uid 5 pid 12";
  m.open.gpu = 1;
  m.open.devices = {1, 0, 2};
  m.open.lane = true;
  ASSERT_TRUE(front.send(m, {p[0], p[1]}).is_ok());
  close(p[0]);
  close(p[1]);
  ToWorker got;
  std::vector<int> fds;
  ASSERT_TRUE(worker.receive(&got, &fds, std::chrono::seconds(5)).is_ok());
  EXPECT_EQ(got.kind, ToWorker::Kind::kOpen);
  EXPECT_EQ(got.open.id, 42u);
  EXPECT_EQ(got.open.sequence, 7u);
  EXPECT_EQ(got.open.client, "prog[12]");
  EXPECT_EQ(got.open.peer, "unix:/x uid 5 pid 12");
  EXPECT_EQ(got.open.gpu, 1);
  EXPECT_EQ(got.open.devices, (std::vector<int>{1, 0, 2}));
  EXPECT_TRUE(got.open.lane);
  ASSERT_EQ(fds.size(), 2u);
  // The descriptors are the pipe's two ends, alive in the receiver.
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  close(fds[0]);
  close(fds[1]);

  // A host-call connection's key is random bytes, zeros among them: all of them arrive.
  ToWorker h;
  h.kind = ToWorker::Kind::kHostCalls;
  h.host_calls.session = 42;
  h.host_calls.key = std::string("a\0b\xff\0", 5);
  ASSERT_TRUE(front.send(h, {}).is_ok());
  ASSERT_TRUE(worker.receive(&got, &fds, std::chrono::seconds(5)).is_ok());
  EXPECT_EQ(got.kind, ToWorker::Kind::kHostCalls);
  EXPECT_EQ(got.host_calls.session, 42u);
  EXPECT_EQ(got.host_calls.key, std::string("a\0b\xff\0", 5));

  // The settings: the tenant's SM partitions, where the front placed them, arrive whole.
  ToWorker init;
  init.kind = ToWorker::Kind::kInit;
  init.init.tenant_name = "a";
  init.init.partitions = {{0, 8, 2, 0, 4}, {1, 6, 2, 3, 3}};
  ASSERT_TRUE(front.send(init, {}).is_ok());
  ASSERT_TRUE(worker.receive(&got, &fds, std::chrono::seconds(5)).is_ok());
  EXPECT_EQ(got.kind, ToWorker::Kind::kInit);
  EXPECT_EQ(got.init.tenant_name, "a");
  ASSERT_EQ(got.init.partitions.size(), 2u);
  EXPECT_EQ(got.init.partitions[0].device, 0);
  EXPECT_EQ(got.init.partitions[0].sms, 8u);
  EXPECT_EQ(got.init.partitions[0].count, 4u);
  EXPECT_EQ(got.init.partitions[1].device, 1);
  EXPECT_EQ(got.init.partitions[1].step, 2u);
  EXPECT_EQ(got.init.partitions[1].first, 3u);
  EXPECT_EQ(got.init.partitions[1].count, 3u);

  FromWorker ended;
  ended.kind = FromWorker::Kind::kEnded;
  ended.id = 42;
  ASSERT_TRUE(worker.send(ended).is_ok());
  FromWorker back;
  ASSERT_TRUE(front.receive(&back, std::chrono::seconds(5)).is_ok());
  EXPECT_EQ(back.kind, FromWorker::Kind::kEnded);
  EXPECT_EQ(back.id, 42u);

  // Nothing within the bound, then the other end gone.
  EXPECT_FALSE(front.receive(&back, std::chrono::milliseconds(10)).is_ok());
  worker = WorkerChannel();
  const Status s = front.receive(&back, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), Status::Code::kDisconnected) << s.message();
}

// The front trusts nothing a worker sends: a packet that is not a message is refused.
TEST(WorkerChannel, RefusesWhatDoesNotDecode) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  WorkerChannel front(sv[0]);
  for (const std::string& junk : {std::string("abc"), std::string(64, '\xff'),
                                  std::string("\0\0\0\0\x10\0\0\0", 8) + std::string(8, '\0')}) {
    ASSERT_EQ(send(sv[1], junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
    FromWorker f;
    const Status s = front.receive(&f, std::chrono::seconds(5));
    EXPECT_EQ(s.code(), Status::Code::kMalformed) << s.message();
  }
  close(sv[1]);
}

// ---- the ledger

TEST(TenantLedger, CapsHoldAcrossSlotsAndMappings) {
  std::unique_ptr<TenantLedger> front, worker;
  ASSERT_TRUE(TenantLedger::create(2, &front).is_ok());
  // A second mapping of the same memfd, as a worker attaches it.
  ASSERT_TRUE(TenantLedger::attach(dup(front->fd()), &worker).is_ok());
  uint64_t used = 0;
  EXPECT_TRUE(worker->charge(0, 0, 100, 40, &used));
  EXPECT_EQ(used, 0u);
  EXPECT_TRUE(front->charge(1, 0, 100, 50, &used));
  EXPECT_EQ(used, 40u);
  // 40 + 50 + 20 passes 100: refused, nothing added.
  EXPECT_FALSE(worker->charge(1, 0, 100, 20, &used));
  EXPECT_EQ(used, 90u);
  EXPECT_EQ(front->used(0), 90u);
  EXPECT_EQ(front->used(1), 0u);  // the other device is apart
  EXPECT_TRUE(worker->charge(1, 0, 100, 10, &used));
  EXPECT_EQ(front->used(0), 100u);
  // Uncharging takes at most what the slot holds.
  worker->uncharge(0, 0, 1000);
  EXPECT_EQ(front->slot_used(0, 0), 0u);
  EXPECT_EQ(front->used(0), 60u);
  // A dead worker's slot is cleared by the front.
  front->clear(1);
  EXPECT_EQ(worker->used(0), 0u);
  // Out of range: refused, not written.
  EXPECT_FALSE(worker->charge(TenantLedger::kSlots, 0, 100, 1, &used));
  EXPECT_FALSE(worker->charge(0, 2, 100, 1, &used));
  EXPECT_FALSE(worker->charge(0, -1, 100, 1, &used));
  // Wrap-around: refused.
  EXPECT_TRUE(worker->charge(0, 1, UINT64_MAX, 10, &used));
  EXPECT_FALSE(worker->charge(1, 1, UINT64_MAX, UINT64_MAX, &used));
}

TEST(TenantLedger, RefusesWhatIsNotALedger) {
  std::unique_ptr<TenantLedger> l;
  ASSERT_TRUE(TenantLedger::create(1, &l).is_ok());
  EXPECT_NE(ftruncate(l->fd(), 0), 0) << "a worker could shrink the ledger under the front";
  EXPECT_FALSE(TenantLedger::create(0, &l).is_ok());
  EXPECT_FALSE(TenantLedger::create(TenantLedger::kMaxDevices + 1, &l).is_ok());
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  close(p[1]);
  EXPECT_FALSE(TenantLedger::attach(p[0], &l).is_ok());
  const int fd = memfd_create("not-a-ledger", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  EXPECT_FALSE(TenantLedger::attach(fd, &l).is_ok());
}

// Two processes charging one byte at a time against one cap: exactly the cap is granted.
TEST(TenantLedger, ExactAcrossProcesses) {
  std::unique_ptr<TenantLedger> ledger;
  ASSERT_TRUE(TenantLedger::create(1, &ledger).is_ok());
  constexpr uint64_t kCap = 3000;
  constexpr int kTries = 2000;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    uint64_t used = 0;
    int granted = 0;
    for (int i = 0; i < kTries; ++i) granted += ledger->charge(1, 0, kCap, 1, &used);
    _exit(granted > 255 ? 255 : 0);
  }
  uint64_t used = 0;
  int granted = 0;
  for (int i = 0; i < kTries; ++i) granted += ledger->charge(0, 0, kCap, 1, &used);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(ledger->used(0), kCap);
  EXPECT_EQ(ledger->slot_used(0, 0), static_cast<uint64_t>(granted));
  EXPECT_EQ(ledger->slot_used(0, 0) + ledger->slot_used(1, 0), kCap);
}

// ---- the settings

// What workers cannot do yet is refused at start, with the reason, not served wrongly.
TEST(WorkerConfig, RefusesWhatWorkersDoNotApplyYet) {
  server::ServerConfig c;
  Address unix_address;
  ASSERT_TRUE(parse_address("unix:/tmp/cuwire-worker-config.sock", &unix_address).is_ok());
  c.listen = {unix_address};
  c.backend = "cuda";
  for (const char* mode : {"auto", "none", "tenant", "session"}) {
    c.isolation = mode;
    EXPECT_TRUE(server::check_config(c).is_ok()) << mode;
  }
  c.isolation = "process";
  EXPECT_NE(server::check_config(c).message().find("not one of auto, tenant, session, none"),
            std::string::npos);
  c.isolation = "tenant";
  c.backend = "sim";
  EXPECT_NE(server::check_config(c).message().find("the sim backend checks every access itself"),
            std::string::npos);
  c.backend = "cuda";
  Address tls;
  ASSERT_TRUE(parse_address("tls:127.0.0.1:0", &tls).is_ok());
  c.listen.push_back(tls);
  EXPECT_TRUE(server::check_config(c).is_ok());  // the front relays TLS connections
  c.listen.pop_back();
  server::TenantSpec t;
  t.name = "alice";
  t.compute = 30;
  c.tenants = {t};
  EXPECT_TRUE(server::check_config(c).is_ok());  // compute caps hold across workers
  t.sms = 8;
  c.tenants = {t};
  EXPECT_TRUE(server::check_config(c).is_ok());  // so do SM partitions
  c.isolation = "none";
  EXPECT_TRUE(server::check_config(c).is_ok());
}

// "auto" puts tenants in workers on the cuda backend over a real driver only, and only where
// everything the config asks for crosses into workers; it says why otherwise.
TEST(WorkerConfig, AutoChoosesTenantWorkersOnARealDriver) {
  server::ServerConfig c;
  Address unix_address;
  ASSERT_TRUE(parse_address("unix:/tmp/x.sock", &unix_address).is_ok());
  c.listen = {unix_address};
  std::string why;
  EXPECT_EQ(server::auto_isolation(c, "cuda", false, &why), server::Isolation::kTenant) << why;
  EXPECT_EQ(server::auto_isolation(c, "sim", false, &why), server::Isolation::kNone);
  EXPECT_NE(why.find("checks every access itself"), std::string::npos) << why;
  EXPECT_EQ(server::auto_isolation(c, "cuda", true, &why), server::Isolation::kNone);
  EXPECT_NE(why.find("upstream server keeps its sessions apart"), std::string::npos) << why;
  server::TenantSpec t;
  t.name = "alice";
  t.compute = 30;  // compute caps cross
  c.tenants = {t};
  EXPECT_EQ(server::auto_isolation(c, "cuda", false, &why), server::Isolation::kTenant) << why;
  c.tenants[0].sms = 8;  // and SM partitions
  EXPECT_EQ(server::auto_isolation(c, "cuda", false, &why), server::Isolation::kTenant) << why;
  Address tls;
  ASSERT_TRUE(parse_address("tls:127.0.0.1:0", &tls).is_ok());
  c.listen.push_back(tls);
  EXPECT_EQ(server::auto_isolation(c, "cuda", false, &why), server::Isolation::kTenant) << why;
}

// ---- a front with workers

// Tenant alice may hold 256 MiB, bob 512 MiB; tokens "alice-token" and "bob-token"; the admin's
// "admin-secret".
constexpr char kTenants[] = R"(
[server]
admin_token = "admin-secret"
[[tenant]]
name = "alice"
token = "alice-token"
memory = "256MiB"
[[tenant]]
name = "bob"
token = "bob-token"
memory = "512MiB"
)";

class WorkerFront : public ::testing::Test {
 protected:
  // A front with `isolation` whose driver is `driver` (cuwire's client library, or the
  // fault-injecting driver in front of it), `args` besides.
  void start(const std::string& isolation, const std::string& driver = CLIENT_LIBRARY,
             std::vector<std::string> args = {}) {
    std::ofstream(dir_.file("front.toml")) << kTenants;
    args.insert(args.end(), {"--config", dir_.file("front.toml"), "--isolation", isolation,
                             "--log-level", "debug"});
    server_ = std::make_unique<TestServer>(TestServerOptions{
        .relay_library = driver, .relay_gpu_server = GPU_SERVER, .relay_args = args});
    ASSERT_TRUE(server_->ok()) << server_->status().message();
  }
  std::string log() const { return server_->relay()->log(); }
  // The pid of the worker the log names for `tenant` last.
  int worker_pid(const std::string& tenant) const {
    // "worker N (tenant NAME): pid P, serving" (no std::regex: GCC 12 warns inside it under
    // ASan).
    const std::string text = log();
    const std::string needle = "(tenant " + tenant + "): pid ";
    int pid = 0;
    for (size_t at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + needle.size())) {
      size_t end = at + needle.size();
      int value = 0;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
        value = value * 10 + (text[end++] - '0');
      }
      if (text.compare(end, 9, ", serving") == 0) pid = value;
    }
    return pid;
  }
  // cap_probe's line for `token`: blocks of 64 MiB it got.
  std::string probe(const std::string& token) {
    ChildProcess p(CAP_PROBE, {"linear", "64"}, server_->env(token));
    const std::string line = p.line();
    EXPECT_EQ(p.wait(), 0) << line;
    return line;
  }
  // `cuwire ARGS --json` as the admin.
  json admin(std::vector<std::string> args) {
    args.push_back("--json");
    std::vector<std::string> env = server_->env("");
    env.push_back("CUWIRE_ADMIN_TOKEN=admin-secret");
    ChildProcess p(CUWIRE_CLI, args, env);
    const std::string out = p.rest();
    EXPECT_EQ(p.wait(), 0) << out;
    json j = json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }
  // The row of `call` in `cuwire stats TENANT --json`; null when it has none.
  static const json* call_row(const json& stats, const std::string& call) {
    for (const json& t : stats["tenants"]) {
      for (const json& c : t["calls_by_name"]) {
        if (c["call"] == call) return &c;
      }
    }
    return nullptr;
  }
  uint64_t calls_of(const std::string& tenant, const std::string& call) {
    const json stats = admin({"stats", "--tenant", tenant});
    const json* row = call_row(stats, call);
    return row ? (*row)["count"].get<uint64_t>() : 0;
  }
  uint64_t memory_used() {
    uint64_t used = 0;
    const json gpus = admin({"gpus"});
    for (const json& g : gpus["gpus"]) used += g["memory_used"].get<uint64_t>();
    EXPECT_FALSE(gpus["gpus"].empty()) << gpus;
    return used;
  }
  std::unique_ptr<ChildProcess> hold(const std::string& token, int mib) {
    auto p = std::make_unique<ChildProcess>(
        HOLD_PROBE, std::vector<std::string>{std::to_string(mib)}, server_->env(token));
    EXPECT_EQ(p->line(), "ready") << log();
    return p;
  }

  TempDir dir_;
  std::unique_ptr<TestServer> server_;
};

TEST_F(WorkerFront, SessionsRunInWorkersWithTheirCaps) {
  start("tenant");
  const std::string a = probe("alice-token");
  EXPECT_EQ(a.rfind("blocks 4 error CUDA_ERROR_OUT_OF_MEMORY total 268435456", 0), 0u) << a;
  const std::string b = probe("bob-token");
  EXPECT_EQ(b.rfind("blocks 8 error CUDA_ERROR_OUT_OF_MEMORY total 536870912", 0), 0u) << b;
  // Each tenant's sessions ran in a worker process of its own, not in the front.
  const int alice = worker_pid("alice"), bob = worker_pid("bob");
  EXPECT_GT(alice, 0) << log();
  EXPECT_GT(bob, 0) << log();
  EXPECT_NE(alice, bob);
  EXPECT_NE(alice, server_->relay()->pid());
  // The same tenant's next session goes to the same worker (idle for less than worker_idle).
  EXPECT_EQ(probe("alice-token").rfind("blocks 4 ", 0), 0u);
  EXPECT_EQ(worker_pid("alice"), alice);
}

// Tenants added at run time (cuwire tenant add, the Kubernetes plugin) run in worker processes
// of their own like the config's, held to their caps by a ledger of their own; removed, their
// worker goes and their name may be used again, with new caps.
TEST_F(WorkerFront, TenantsAddedAtRunTimeRunInWorkers) {
  start("tenant");
  const std::string token_file = dir_.file("carol.token");
  std::ofstream(token_file) << "carol-token\n";
  json added = admin({"tenant", "add", "carol", "--token-file", token_file, "--memory", "128MiB"});
  EXPECT_EQ(added["tenant"], "carol") << added;
  EXPECT_EQ(
      probe("carol-token").rfind("blocks 2 error CUDA_ERROR_OUT_OF_MEMORY total 134217728", 0), 0u);
  const int carol = worker_pid("carol");
  EXPECT_GT(carol, 0) << log();
  EXPECT_NE(carol, worker_pid("alice"));
  // Its memory is in the front's figures while a session holds it.
  {
    auto held = hold("carol-token", 64);
    EXPECT_GE(memory_used(), 64ull << 20);
  }
  const json removed = admin({"tenant", "remove", "carol"});
  EXPECT_EQ(removed["retired"], true) << removed << log();
  EXPECT_NE(log().find("(tenant carol): its tenant is removed; letting it go"), std::string::npos);
  EXPECT_EQ(kill(carol, 0), -1);  // reaped
  // The name again, with another cap: a new ledger, a new worker.
  added = admin({"tenant", "add", "carol", "--token-file", token_file, "--memory", "192MiB"});
  EXPECT_EQ(probe("carol-token").rfind("blocks 3 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << log();
  EXPECT_NE(worker_pid("carol"), carol);
  EXPECT_EQ(probe("alice-token").rfind("blocks 4 ", 0), 0u);
}

// isolation = "session": each session in a worker of its own, and the tenant's cap holds across
// them exactly (the ledger); a session's memory is given back when its worker goes.
TEST_F(WorkerFront, CapsExactAcrossWorkers) {
  start("session");
  auto first = hold("alice-token", 192);
  const int first_worker = worker_pid("alice");
  EXPECT_GT(first_worker, 0);
  // 64 MiB of alice's 256 are left, in another worker.
  EXPECT_EQ(probe("alice-token").rfind("blocks 1 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u);
  EXPECT_NE(worker_pid("alice"), first_worker);
  first.reset();  // its stdin closes: the probe exits, its session and its worker end
  for (int i = 0; i < 100 && probe("alice-token").rfind("blocks 4 ", 0) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(probe("alice-token").rfind("blocks 4 ", 0), 0u) << log();
}

// A worker that dies ends only its own sessions: they learn it (the device is unavailable), the
// log says which worker died and how, the other tenant's session goes on, its memory leaves
// the figures, and the tenant's next session gets a new worker.
TEST_F(WorkerFront, DeadWorkerEndsOnlyItsSessions) {
  start("tenant");
  auto alice = hold("alice-token", 128);
  auto bob = hold("bob-token", 128);
  const int victim = worker_pid("alice");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSEGV), 0);
  for (int i = 0; i < 200 && log().find(kSegvEnd) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_NE(log().find("(pid " + std::to_string(victim) + ") " + kSegvEnd), std::string::npos)
      << log();
  alice->send("go\n");
  EXPECT_EQ(alice->line(), "after CUDA_ERROR_DEVICE_UNAVAILABLE");
  // What the dead worker's session did stays counted: its allocation.
  EXPECT_EQ(calls_of("alice", "cuMemAlloc_v2"), 1u);
  // The figures drop what the dead worker held: bob's hold (its 128 MiB and its context's
  // own page) is all that is left.
  const uint64_t left = memory_used();
  EXPECT_GE(left, 128ull << 20);
  EXPECT_LT(left, 256ull << 20);
  bob->send("go\n");
  EXPECT_EQ(bob->line(), "after CUDA_SUCCESS");
  // The dead worker's 128 MiB are gone from alice's ledger: a new worker has all 256.
  const std::string again = probe("alice-token");
  EXPECT_EQ(again.rfind("blocks 4 ", 0), 0u) << again << log();
  EXPECT_NE(worker_pid("alice"), victim);
}

// A TLS connection cannot be handed over as it is (its keys are the front's): the front hands
// the worker one end of a socket pair and relays the connection's bytes over the other. Caps
// hold in the worker as over unix:, and when the worker dies, the front, which kept the TLS
// connection, tells the client so.
TEST_F(WorkerFront, TlsSessionsRunInWorkersThroughTheFront) {
  const std::string cert = dir_.file("cert.pem"), key = dir_.file("key.pem");
  make_self_signed_cert(cert, key);
  start("tenant", CLIENT_LIBRARY,
        {"--listen", "tls:127.0.0.1:0", "--tls-cert", cert, "--tls-key", key});
  // The relay's bound addresses, its TLS one among them (the certificate names localhost).
  std::string tls;
  std::istringstream ready(read_file(server_->dir().file("relay.ready")));
  for (std::string line; std::getline(ready, line);) {
    if (line.rfind("tls:127.0.0.1:", 0) == 0) tls = "tls:localhost:" + line.substr(14);
  }
  ASSERT_FALSE(tls.empty()) << read_file(server_->dir().file("relay.ready"));
  const auto env = [&](const std::string& token) {
    return std::vector<std::string>{"CUWIRE_SERVER=" + tls, "CUWIRE_TOKEN=" + token,
                                    "CUWIRE_CA=" + cert};
  };
  ChildProcess probe(CAP_PROBE, {"linear", "64"}, env("alice-token"));
  const std::string line = probe.line();
  EXPECT_EQ(probe.wait(), 0) << line;
  EXPECT_EQ(line.rfind("blocks 4 error CUDA_ERROR_OUT_OF_MEMORY total 268435456", 0), 0u)
      << line << log();
  const int alice = worker_pid("alice");
  EXPECT_GT(alice, 0) << log();
  EXPECT_NE(log().find("tenant alice, in worker " + std::to_string(alice)), std::string::npos)
      << log();
  // A held session over TLS, then its worker killed.
  ChildProcess held(HOLD_PROBE, {"64"}, env("alice-token"));
  ASSERT_EQ(held.line(), "ready") << log();
  ASSERT_EQ(kill(worker_pid("alice"), SIGSEGV), 0);
  for (int i = 0; i < 200 && log().find(kSegvEnd) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  held.send("go\n");
  EXPECT_EQ(held.line(), "after CUDA_ERROR_DEVICE_UNAVAILABLE") << log();
  EXPECT_EQ(held.wait(), 0);
}

// The admin's commands reach sessions in workers: the list names each session's worker, the
// GPUs' figures count every worker's memory (the ledgers), new caps reach a running worker,
// and an evicted session ends in its worker and gives its memory back.
TEST_F(WorkerFront, AdminCommandsReachSessionsInWorkers) {
  start("tenant");
  auto alice = hold("alice-token", 64);
  auto bob = hold("bob-token", 32);
  uint64_t alice_id = 0;
  int alice_worker = 0, bob_worker = 0;
  const json sessions = admin({"sessions"});
  SCOPED_TRACE(sessions.dump());
  for (const json& s : sessions["sessions"]) {
    ASSERT_TRUE(s.contains("worker_pid")) << s;
    if (s["tenant"] == "alice") {
      alice_id = s["id"];
      alice_worker = s["worker_pid"];
    } else {
      bob_worker = s["worker_pid"];
    }
  }
  EXPECT_EQ(alice_worker, worker_pid("alice"));
  EXPECT_EQ(bob_worker, worker_pid("bob"));
  EXPECT_EQ(memory_used(), 96ull << 20);
  // Each session's figures come from its worker: its calls and the memory it holds.
  for (const json& s : sessions["sessions"]) {
    EXPECT_GT(s["calls"].get<uint64_t>(), 2u) << s;
    EXPECT_EQ(s["memory_used"].get<uint64_t>(), (s["tenant"] == "alice" ? 64ull : 32ull) << 20);
  }
  const uint64_t allocs = calls_of("alice", "cuMemAlloc_v2");
  EXPECT_EQ(allocs, 1u);
  // alice's cap down to 128 MiB while her worker runs: 64 MiB of it left for a new session.
  const json set = admin({"tenant", "set", "alice", "--memory", "128MiB"});
  EXPECT_EQ(set["caps"]["memory_bytes"].get<uint64_t>(), 128ull << 20);
  const std::string line = probe("alice-token");
  EXPECT_EQ(line.rfind("blocks 1 error CUDA_ERROR_OUT_OF_MEMORY total 134217728", 0), 0u) << line;
  EXPECT_EQ(worker_pid("alice"), alice_worker);
  const json evicted = admin({"evict", std::to_string(alice_id)});
  EXPECT_EQ(evicted["ended"], true) << evicted;
  EXPECT_EQ(memory_used(), 32ull << 20);
  alice->send("go\n");
  const std::string what = alice->line();
  EXPECT_EQ(what.rfind("after CUDA_ERROR_", 0), 0u) << what;
  bob->send("go\n");
  EXPECT_EQ(bob->line(), "after CUDA_SUCCESS");
  // The ended sessions' figures stay in the tenant's: the evicted one's allocation and the
  // probe's three (one refused for the cap, one after it gave a block back).
  const json stats = admin({"stats", "--tenant", "alice"});
  SCOPED_TRACE(stats.dump());
  const json* row = call_row(stats, "cuMemAlloc_v2");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ((*row)["count"].get<uint64_t>(), 1u + 3u);
  EXPECT_EQ((*row)["error_codes"]["CUDA_ERROR_OUT_OF_MEMORY"].get<uint64_t>(), 1u);
}

// Each way a worker can end (the fault-injecting driver, at an allocation the client chooses) is
// reported as what it was, ends only the session it held, and leaves the tenant's next session a
// new worker with all of its cap; the other tenant's session goes on throughout.
TEST_F(WorkerFront, EachWayOfDyingIsReported) {
  start("tenant", FAULT_DRIVER, {"--worker-timeout", "1s"});
  auto bob = hold("bob-token", 64);
  const int bob_worker = worker_pid("bob");
  const struct {
    const char* mode;
    const char* log;
  } cases[] = {{"segv", kSegvEnd},
               {"abort", "killed by signal 6 (SIGABRT)"},
               {"exit", "exited with status 3"},
               {"kill", "killed by signal 9 (SIGKILL): the kernel's OOM killer"},
               {"hang", "did not answer within 1000 ms and was killed"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.mode);
    // A worker for alice, with all of her cap (the last one's memory went with it).
    const std::string before = probe("alice-token");
    EXPECT_EQ(before.rfind("blocks 4 ", 0), 0u) << before;
    const int victim = worker_pid("alice");
    ChildProcess p(FAULT_PROBE, {c.mode}, server_->env("alice-token"));
    EXPECT_EQ(p.line(), "after CUDA_ERROR_DEVICE_UNAVAILABLE");
    EXPECT_EQ(p.wait(), 0);
    for (int i = 0;
         i < 200 && log().find(std::to_string(victim) + ") " + c.log) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    EXPECT_NE(log().find("(pid " + std::to_string(victim) + ") " + c.log), std::string::npos)
        << log();
  }
  const std::string again = probe("alice-token");
  EXPECT_EQ(again.rfind("blocks 4 ", 0), 0u) << again;
  EXPECT_EQ(worker_pid("bob"), bob_worker);
  bob->send("go\n");
  EXPECT_EQ(bob->line(), "after CUDA_SUCCESS");
}

}  // namespace
}  // namespace cuwire::testing
