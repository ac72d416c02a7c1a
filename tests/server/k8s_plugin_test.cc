// cuwire-k8s-plugin (k8s-plugin/plugin.h) against a fake kubelet: the kubelet's Registration
// and pod-resources services served here on Unix sockets in a temporary device-plugin
// directory, the plugin's DevicePlugin services called as the kubelet calls them, and a real
// gpu-server (in-process, two simulated GPUs of 1 GiB) whose tenants the plugin makes. Programs
// then run with what Allocate returned.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "client-lib/core/control_client.h"
#include "k8s-plugin/api/deviceplugin.grpc.pb.h"
#include "k8s-plugin/api/podresources.grpc.pb.h"
#include "k8s-plugin/ledger.h"
#include "k8s-plugin/plugin.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using k8s::Resource;

const char kConfig[] = R"(
[server]
admin_token = "admin-secret"
open = false
)";

TestServerOptions two_small_gpus() {
  TestServerOptions o;
  o.gpus = 2;
  o.memory_bytes = uint64_t{1} << 30;
  o.config = kConfig;
  return o;
}

// The kubelet's side: Registration on kubelet.sock, pod-resources on pod-resources.sock.
class FakeKubelet final : public v1beta1::Registration::Service,
                          public v1::PodResourcesLister::Service {
 public:
  explicit FakeKubelet(const fs::path& dir) : dir_(dir) { start(); }
  ~FakeKubelet() override { stop(); }

  void start() {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + (dir_ / "kubelet.sock").string(),
                       grpc::InsecureServerCredentials());
    b.RegisterService(static_cast<v1beta1::Registration::Service*>(this));
    registration_ = b.BuildAndStart();
    grpc::ServerBuilder p;
    p.AddListeningPort("unix:" + (dir_ / "pod-resources.sock").string(),
                       grpc::InsecureServerCredentials());
    p.RegisterService(static_cast<v1::PodResourcesLister::Service*>(this));
    pod_resources_ = p.BuildAndStart();
  }
  // As a kubelet restarting does: its socket and every plugin's socket deleted.
  void restart() {
    stop();
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ".sock") fs::remove(e.path());
    }
    start();
  }
  void stop() {
    if (registration_) registration_->Shutdown(std::chrono::system_clock::now());
    if (pod_resources_) pod_resources_->Shutdown(std::chrono::system_clock::now());
    registration_.reset();
    pod_resources_.reset();
  }

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                        v1beta1::Empty*) override {
    std::lock_guard lock(mu_);
    registered_.push_back(*req);
    cv_.notify_all();
    return grpc::Status::OK;
  }
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* out) override {
    std::lock_guard lock(mu_);
    *out = pods_;
    return grpc::Status::OK;
  }

  // Waits until `n` Register calls came; the requests.
  std::vector<v1beta1::RegisterRequest> registered(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(20), [&] { return registered_.size() >= n; });
    return registered_;
  }
  // The containers running now: each a map resource -> device IDs.
  void set_containers(const std::vector<std::map<std::string, std::vector<std::string>>>& cs) {
    std::lock_guard lock(mu_);
    pods_.Clear();
    int i = 0;
    for (const auto& c : cs) {
      auto* pod = pods_.add_pod_resources();
      pod->set_name(std::string("pod-").append(std::to_string(i++)));
      pod->set_namespace_("default");
      auto* ctr = pod->add_containers();
      ctr->set_name("main");
      for (const auto& [resource, ids] : c) {
        auto* d = ctr->add_devices();
        d->set_resource_name(resource);
        for (const auto& id : ids) d->add_device_ids(id);
      }
    }
  }

 private:
  fs::path dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::RegisterRequest> registered_;
  v1::ListPodResourcesResponse pods_;
  std::unique_ptr<grpc::Server> registration_, pod_resources_;
};

class K8sPluginTest : public ::testing::Test {
 protected:
  K8sPluginTest() : server_(two_small_gpus()), kubelet_(dir_.path()) {}

  k8s::PluginOptions options() const {
    k8s::PluginOptions o;
    o.device_plugin_dir = dir_.path().string();
    o.pod_resources_socket = (dir_.path() / "pod-resources.sock").string();
    o.servers.push_back({server_.address().to_string(), ""});
    o.admin_token = "admin-secret";
    o.state_dir = (dir_.path() / "state").string();
    o.client_lib_dir = dir_.path().string();
    o.node = "node-a";
    o.interval = std::chrono::milliseconds(100);
    o.reap_grace = std::chrono::milliseconds(0);
    return o;
  }

  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin(Resource r) const {
    return v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix:" + (dir_.path() / k8s::socket_name(r)).string(),
                            grpc::InsecureChannelCredentials()));
  }

  // The list ListAndWatch sends first: the devices now, id -> health.
  std::map<std::string, std::string> devices(Resource r) const {
    auto stub = plugin(r);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1beta1::Empty empty;
    auto reader = stub->ListAndWatch(&ctx, empty);
    v1beta1::ListAndWatchResponse resp;
    std::map<std::string, std::string> out;
    if (!reader->Read(&resp)) return out;
    for (const auto& d : resp.devices()) out[d.id()] = d.health();
    ctx.TryCancel();
    return out;
  }
  size_t healthy(Resource r) const {
    size_t n = 0;
    for (const auto& [id, h] : devices(r)) n += h == "Healthy";
    return n;
  }
  // `n` free device IDs of `r`, as the kubelet would pick them.
  std::vector<std::string> pick(Resource r, size_t n, const std::set<std::string>& taken = {}) {
    std::vector<std::string> out;
    for (const auto& [id, h] : devices(r)) {
      if (out.size() == n) break;
      if (h == "Healthy" && !taken.count(id)) out.push_back(id);
    }
    EXPECT_EQ(out.size(), n);
    return out;
  }

  grpc::Status allocate(Resource r, const std::vector<std::string>& ids,
                        v1beta1::ContainerAllocateResponse* out) {
    auto stub = plugin(r);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : ids) c->add_devices_ids(id);
    v1beta1::AllocateResponse resp;
    grpc::Status s = stub->Allocate(&ctx, req, &resp);
    if (s.ok() && resp.container_responses_size() == 1) *out = resp.container_responses(0);
    return s;
  }
  grpc::Status pre_start(Resource r, const std::vector<std::string>& ids) {
    auto stub = plugin(r);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1beta1::PreStartContainerRequest req;
    for (const auto& id : ids) req.add_devices_ids(id);
    v1beta1::PreStartContainerResponse resp;
    return stub->PreStartContainer(&ctx, req, &resp);
  }

  // The environment a container given `resp` (and `more`) sees, its mounts made as symlinks
  // under a directory of this test: the token directory and CUWIRE_SERVER.
  std::vector<std::string> container_env(const std::vector<v1beta1::ContainerAllocateResponse>& rs,
                                         const std::string& name) {
    const fs::path root = dir_.path() / ("container-" + name);
    fs::create_directories(root);
    std::vector<std::string> env;
    std::string token_dir;
    for (const auto& r : rs) {
      for (const auto& m : r.mounts()) {
        const fs::path at = root / fs::path(m.container_path()).relative_path();
        fs::create_directories(at.parent_path());
        std::error_code ec;
        fs::create_directory_symlink(m.host_path(), at, ec);
        EXPECT_TRUE(m.read_only()) << m.container_path();
      }
      for (const auto& [k, v] : r.envs()) {
        if (k == "CUWIRE_TOKEN_DIR") token_dir = (root / fs::path(v).relative_path()).string();
        if (k == "CUWIRE_SERVER" && env.empty()) env.push_back("CUWIRE_SERVER=" + v);
      }
    }
    env.push_back("CUWIRE_TOKEN_DIR=" + token_dir);
    env.push_back("CUWIRE_TOKEN=");
    return env;
  }

  json usage() {
    client::ControlOptions c;
    c.server = server_.address().to_string();
    c.token = "admin-secret";
    std::unique_ptr<client::ControlClient> cc;
    json out;
    if (Status s = client::ControlClient::connect(c, &cc); !s) {
      ADD_FAILURE() << s.to_string();
      return out;
    }
    std::string body;
    if (Status s = cc->request("usage", "", &body); !s) {
      ADD_FAILURE() << s.to_string();
      return out;
    }
    return json::parse(body);
  }
  // The plugin's tenants on the server: name -> {memory_cap MiB, compute_cap, gpu}.
  std::map<std::string, std::tuple<uint64_t, int, int>> tenants() {
    std::map<std::string, std::tuple<uint64_t, int, int>> out;
    const json u = usage();
    for (const auto& g : u["gpus"]) {
      for (const auto& t : g["tenants"]) {
        const std::string name = t["tenant"];
        if (name.rfind("k8s-node-a-", 0) != 0) continue;
        out[name] = {t["memory_cap"].get<uint64_t>() >> 20, t["compute_cap"].get<int>(),
                     g["index"].get<int>()};
      }
    }
    return out;
  }

  // Waits up to 20 s for `done`.
  template <typename F>
  bool eventually(F done) {
    for (int i = 0; i < 200; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return done();
  }

  TempDir dir_;
  TestServer server_;
  FakeKubelet kubelet_;
};

TEST(K8sLedger, AmountsPlacementAndDeviceLists) {
  k8s::Ledger ledger(
      {.memory_unit_mib = 1, .memory_granularity_mib = 128, .compute_granularity = 5});
  auto room = [](int index, uint64_t memory_mib, int compute, bool shared) {
    k8s::GpuRoom g;
    g.index = index;
    g.memory_mib = memory_mib;
    g.compute = compute;
    g.shared = shared;
    return g;
  };
  ledger.set_server(0, {room(0, 1000, 100, false), room(1, 600, 70, true)});
  // Room rounded down to the granularity on each GPU: 896 + 512 MiB; 100 + 70 %; one card
  // (GPU 1 is shared with a configured tenant).
  EXPECT_EQ(ledger.devices(Resource::kMemory).size(), 896u + 512u);
  EXPECT_EQ(ledger.devices(Resource::kCompute).size(), 170u);
  EXPECT_EQ(ledger.devices(Resource::kCard).size(), 1u);
  uint64_t amount = 0;
  std::string error;
  EXPECT_FALSE(ledger.amount_of(Resource::kMemory, {"m0", "m1"}, &amount, &error));
  EXPECT_NE(error.find("multiples of 128 MiB"), std::string::npos) << error;
  EXPECT_FALSE(ledger.amount_of(Resource::kCompute, {"c0", "c1", "c2"}, &amount, &error));
  EXPECT_FALSE(ledger.amount_of(Resource::kMemory, {"x0"}, &amount, &error));
  EXPECT_FALSE(ledger.amount_of(Resource::kCompute, {"c01"}, &amount, &error));
  EXPECT_FALSE(
      ledger.amount_of(Resource::kCompute, {"c1", "c1", "c2", "c3", "c4"}, &amount, &error));
  std::vector<std::string> ids;
  for (int i = 0; i < 640; ++i) ids.push_back(std::string("m").append(std::to_string(i)));
  ASSERT_TRUE(ledger.amount_of(Resource::kMemory, ids, &amount, &error)) << error;
  EXPECT_EQ(amount, 640u);
  int server = -1;
  std::vector<int> gpus;
  // 640 MiB fits only GPU 0 (the most room).
  ASSERT_TRUE(ledger.place(Resource::kMemory, amount, &server, &gpus, &error)) << error;
  EXPECT_EQ(gpus, std::vector<int>{0});
  k8s::Grant grant;
  grant.id = "a";
  grant.devices = ids;
  grant.amount = 640;
  grant.gpus = {0};
  ledger.add(grant);
  // Held IDs are still listed (the kubelet keeps them), free ones follow: 640 + 256 + 512.
  const auto memory = ledger.devices(Resource::kMemory);
  EXPECT_EQ(memory.size(), 640u + 256u + 512u);
  EXPECT_EQ(ledger.devices(Resource::kCard).size(), 0u);  // GPU 0 is no longer whole
  EXPECT_FALSE(ledger.amount_of(Resource::kMemory, {"m5"}, &amount, &error));  // held
  EXPECT_NE(error.find("held"), std::string::npos);
  // 512 MiB: GPU 1 now has the most room.
  ASSERT_TRUE(ledger.place(Resource::kMemory, 512, &server, &gpus, &error));
  EXPECT_EQ(gpus, std::vector<int>{1});
  EXPECT_FALSE(ledger.place(Resource::kMemory, 640, &server, &gpus, &error));
  EXPECT_NE(error.find("no GPU has room for 640 MiB"), std::string::npos) << error;
  // Compute 80 %: only GPU 0 has it; memory and compute together: 400 MiB + 80 % does not fit.
  ASSERT_TRUE(ledger.place(Resource::kCompute, 80, &server, &gpus, &error));
  EXPECT_EQ(gpus, std::vector<int>{0});
  EXPECT_FALSE(ledger.place(Resource::kMemory, 400, &server, &gpus, &error, 0, 80));
  EXPECT_TRUE(ledger.place(Resource::kMemory, 256, &server, &gpus, &error, 0, 80));
  // An unreachable server's devices: held ones Unhealthy, no free ones.
  ledger.set_health(0, false);
  size_t unhealthy = 0;
  for (const auto& [id, ok] : ledger.devices(Resource::kMemory)) unhealthy += !ok;
  EXPECT_EQ(unhealthy, 640u);
  EXPECT_EQ(ledger.devices(Resource::kMemory).size(), 640u);
}

// Nodes' names in tenant names: as they are where they fit, else told apart by a hash.
TEST(K8sLedger, NodeLabelsNeverCollide) {
  EXPECT_EQ(k8s::node_label("gpu-node-3.example"), "gpu-node-3.example");
  EXPECT_EQ(k8s::node_label(""), "node");
  const std::string stem(45, 'n');
  const std::string a = k8s::node_label(stem + "-a"), b = k8s::node_label(stem + "-b");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a.rfind(std::string(31, 'n') + "-", 0), 0u) << a;
  EXPECT_NE(k8s::node_label("a_b"), k8s::node_label("a-b"));  // '_' is not kept as itself
  EXPECT_EQ(k8s::node_label("a_b").rfind("a-b-", 0), 0u);
}

TEST_F(K8sPluginTest, RegistersAllocatesJoinsAndReleases) {
  ASSERT_TRUE(server_.ok());
  k8s::Plugin plugin(options());
  ASSERT_TRUE(plugin.start().is_ok());
  const auto regs = kubelet_.registered(3);
  ASSERT_EQ(regs.size(), 3u);
  std::set<std::string> names, endpoints;
  for (const auto& r : regs) {
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_TRUE(r.options().pre_start_required());
    names.insert(r.resource_name());
    endpoints.insert(r.endpoint());
    EXPECT_TRUE(fs::exists(dir_.path() / r.endpoint())) << r.endpoint();
  }
  EXPECT_EQ(names, (std::set<std::string>{"cuwire.io/gpu-memory", "cuwire.io/gpu-compute",
                                          "cuwire.io/gpu"}));
  // open = false: no tenant at all (not the open server's default one) until the plugin adds.
  {
    const json u = usage();
    ASSERT_EQ(u["gpus"].size(), 2u);
    EXPECT_TRUE(u["gpus"][0]["tenants"].empty()) << u.dump();
  }
  // Two GPUs of 1 GiB and nobody else on them: 2048 MiB, 200 %, 2 cards.
  EXPECT_EQ(healthy(Resource::kMemory), 2048u);
  EXPECT_EQ(healthy(Resource::kCompute), 200u);
  EXPECT_EQ(healthy(Resource::kCard), 2u);

  // A size off the granularity is refused with why; nothing is made.
  v1beta1::ContainerAllocateResponse resp;
  grpc::Status s = allocate(Resource::kMemory, pick(Resource::kMemory, 100), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("multiples of 128 MiB"), std::string::npos) << s.error_message();
  EXPECT_TRUE(tenants().empty());

  // 128 MiB for one container: a tenant held to it, found through what Allocate answered.
  // (The kubelet lists a container's devices as it allocates them: set first here, since the
  // plugin releases what no container holds.)
  const auto small = pick(Resource::kMemory, 128);
  kubelet_.set_containers({{{"cuwire.io/gpu-memory", small}}});
  ASSERT_TRUE(allocate(Resource::kMemory, small, &resp).ok());
  EXPECT_EQ(resp.envs().at("CUWIRE_SERVER"), server_.address().to_string());
  EXPECT_EQ(resp.envs().at("CUWIRE_TOKEN_DIR"), "/var/run/cuwire");
  EXPECT_EQ(resp.envs().at("LD_LIBRARY_PATH").rfind("/usr/local/cuwire/lib", 0), 0u);
  ASSERT_EQ(resp.mounts_size(), 2);
  EXPECT_EQ(resp.mounts(0).container_path(), "/var/run/cuwire/memory");
  EXPECT_EQ(resp.mounts(1).container_path(), "/usr/local/cuwire/lib");
  EXPECT_EQ(resp.mounts(1).host_path(), dir_.path().string());
  {
    auto t = tenants();
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(std::get<0>(t.begin()->second), 128u);
    EXPECT_EQ(std::get<1>(t.begin()->second), 0);
    // With its stderr: the client library says once that the tenant's cap was reached.
    ChildProcess probe("/bin/sh", {"-c", std::string("exec ") + CAP_PROBE + " linear 16 2>&1"},
                       container_env({resp}, "small"));
    const std::string said = probe.line();
    EXPECT_NE(said.find("cuwire: an allocation was refused: this program's tenant has reached "
                        "its memory cap"),
              std::string::npos)
        << said;
    const std::string line = probe.line();
    EXPECT_EQ(line.rfind("blocks 2 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
    EXPECT_EQ(probe.rest(), "");  // said once
    probe.wait();
    // The token file named alone (CUWIRE_TOKEN_FILE) does as well.
    ChildProcess by_file(CAP_PROBE, {"linear", "16"},
                         {"CUWIRE_SERVER=" + server_.address().to_string(), "CUWIRE_TOKEN=",
                          "CUWIRE_TOKEN_FILE=" + resp.mounts(0).host_path() + "/token"});
    const std::string again = by_file.line();
    EXPECT_EQ(again.rfind("blocks 2 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << again;
    by_file.wait();
  }
  // Its devices are still advertised (the kubelet holds them); the free count is the room.
  EXPECT_EQ(devices(Resource::kMemory).size(), 2048u);
  // A whole card: GPU 1 (GPU 0 holds the grant), then none is left.
  EXPECT_EQ(healthy(Resource::kCard), 1u);

  // Another container asks for 256 MiB and 30 %: two Allocates, two tenants, then joined into
  // one before it starts, as the pod-resources API shows it holding both.
  std::set<std::string> held(small.begin(), small.end());
  const auto mem = pick(Resource::kMemory, 256, held);
  const auto cmp = pick(Resource::kCompute, 30);
  v1beta1::ContainerAllocateResponse rm, rc;
  kubelet_.set_containers({{{"cuwire.io/gpu-memory", small}},
                           {{"cuwire.io/gpu-memory", mem}, {"cuwire.io/gpu-compute", cmp}}});
  ASSERT_TRUE(allocate(Resource::kMemory, mem, &rm).ok());
  ASSERT_TRUE(allocate(Resource::kCompute, cmp, &rc).ok());
  EXPECT_EQ(tenants().size(), 3u);
  ASSERT_TRUE(pre_start(Resource::kMemory, mem).ok());
  const auto joined_once = tenants();
  ASSERT_TRUE(pre_start(Resource::kCompute, cmp).ok());  // already joined: nothing to do
  EXPECT_EQ(tenants(), joined_once);
  {
    auto t = tenants();
    ASSERT_EQ(t.size(), 2u);
    int joined = 0;
    for (const auto& [name, caps] : t) {
      if (name.find("-j") == std::string::npos) continue;
      ++joined;
      EXPECT_EQ(std::get<0>(caps), 256u);
      EXPECT_EQ(std::get<1>(caps), 30);
    }
    EXPECT_EQ(joined, 1);
    // Both grants' token files hold the joined tenant's token; a program sees its 256 MiB.
    ChildProcess probe(CAP_PROBE, {"linear", "16"}, container_env({rc, rm}, "joined"));
    const std::string line = probe.line();
    EXPECT_EQ(line.rfind("blocks 4 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
    probe.wait();
  }

  // The first container is gone: its grant is released and its tenant removed.
  kubelet_.set_containers({{{"cuwire.io/gpu-memory", mem}, {"cuwire.io/gpu-compute", cmp}}});
  EXPECT_TRUE(eventually([&] { return tenants().size() == 1; }));
  EXPECT_TRUE(eventually([&] { return healthy(Resource::kCard) == 1; }));
  // And the second: nothing of the plugin is left on the server.
  kubelet_.set_containers({});
  EXPECT_TRUE(eventually([&] { return tenants().empty(); }));
  EXPECT_TRUE(eventually([&] { return healthy(Resource::kCard) == 2; }));
  EXPECT_TRUE(eventually([&] { return fs::is_empty(dir_.path() / "state" / "grants"); }));
  plugin.stop();
}

// Remote sharing with two gpu-servers behind one node's plugin: a container's memory and
// compute grants, each placed where there is most room of its kind, land on different servers;
// joined, they come together on a GPU that holds both, and the grant directories name that
// server beside the token, which the client library follows over CUWIRE_SERVER.
TEST_F(K8sPluginTest, GrantsOnTwoServersJoinOnOne) {
  ASSERT_TRUE(server_.ok());
  // The other server: one GPU of 2 GiB, 80 % of it held by a tenant of its config.
  TestServerOptions bo;
  bo.gpus = 1;
  bo.memory_bytes = uint64_t{2} << 30;
  bo.config = std::string(kConfig) +
              "[[tenant]]\nname = \"busy\"\ntoken = \"busy-token\"\nmemory = \"128MiB\"\n"
              "compute = 80\n";
  TestServer other(bo);
  ASSERT_TRUE(other.ok()) << other.status().message();
  k8s::PluginOptions o = options();
  o.servers.push_back({other.address().to_string(), ""});
  k8s::Plugin plugin(o);
  ASSERT_TRUE(plugin.start().is_ok());
  ASSERT_EQ(kubelet_.registered(3).size(), 3u);
  EXPECT_EQ(healthy(Resource::kMemory), 2048u + 1920u);
  EXPECT_EQ(healthy(Resource::kCompute), 200u + 20u);

  const auto mem = pick(Resource::kMemory, 256);
  const auto cmp = pick(Resource::kCompute, 30);
  kubelet_.set_containers({{{"cuwire.io/gpu-memory", mem}, {"cuwire.io/gpu-compute", cmp}}});
  v1beta1::ContainerAllocateResponse rm, rc;
  ASSERT_TRUE(allocate(Resource::kMemory, mem, &rm).ok());
  ASSERT_TRUE(allocate(Resource::kCompute, cmp, &rc).ok());
  // Memory where most memory is free (the other server's 1920 MiB), compute where most
  // compute is (this one's 100 %).
  EXPECT_EQ(rm.envs().at("CUWIRE_SERVER"), other.address().to_string());
  EXPECT_EQ(rc.envs().at("CUWIRE_SERVER"), server_.address().to_string());
  ASSERT_TRUE(pre_start(Resource::kMemory, mem).ok());
  auto t = tenants();  // on this server
  ASSERT_EQ(t.size(), 1u);
  EXPECT_NE(t.begin()->first.find("-j"), std::string::npos) << t.begin()->first;
  EXPECT_EQ(std::get<0>(t.begin()->second), 256u);
  EXPECT_EQ(std::get<1>(t.begin()->second), 30);
  for (const auto& r : {rm, rc}) {
    std::ifstream in(r.mounts(0).host_path() + "/server");
    std::string named;
    std::getline(in, named);
    EXPECT_EQ(named, server_.address().to_string()) << r.mounts(0).container_path();
  }
  // The container's CUWIRE_SERVER is the memory grant's (the other server), as the kubelet may
  // well have left it: the program still reaches its tenant, and sees its 256 MiB.
  const auto env = container_env({rm, rc}, "two-servers");
  ASSERT_EQ(env.front(), "CUWIRE_SERVER=" + other.address().to_string());
  ChildProcess probe(CAP_PROBE, {"linear", "16"}, env);
  const std::string line = probe.line();
  EXPECT_EQ(line.rfind("blocks 4 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
  probe.wait();
  kubelet_.set_containers({});
  EXPECT_TRUE(eventually([&] { return tenants().empty(); }));
  plugin.stop();
}

TEST_F(K8sPluginTest, KubeletRestartServerRestartAndPluginRestart) {
  ASSERT_TRUE(server_.ok());
  auto plugin = std::make_unique<k8s::Plugin>(options());
  ASSERT_TRUE(plugin->start().is_ok());
  ASSERT_EQ(kubelet_.registered(3).size(), 3u);
  const auto ids = pick(Resource::kMemory, 128);
  kubelet_.set_containers({{{"cuwire.io/gpu-memory", ids}}});
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(allocate(Resource::kMemory, ids, &resp).ok());

  // The kubelet restarts, deleting every socket: the plugin serves and registers again.
  kubelet_.restart();
  EXPECT_GE(kubelet_.registered(6).size(), 6u);
  EXPECT_TRUE(eventually([&] { return plugin->registrations() >= 2; }));
  for (Resource r : k8s::kResources) EXPECT_TRUE(fs::exists(dir_.path() / k8s::socket_name(r)));
  EXPECT_TRUE(eventually([&] { return healthy(Resource::kMemory) == 2048u; }));

  // One socket deleted (the kubelet unchanged): that one alone is served and registered again;
  // the others are left as they are.
  struct stat memory_before {};
  ASSERT_EQ(::stat((dir_.path() / k8s::socket_name(Resource::kMemory)).c_str(), &memory_before), 0);
  fs::remove(dir_.path() / k8s::socket_name(Resource::kCompute));
  const auto seven = kubelet_.registered(7);
  ASSERT_EQ(seven.size(), 7u);
  EXPECT_EQ(seven.back().resource_name(), "cuwire.io/gpu-compute");
  EXPECT_TRUE(fs::exists(dir_.path() / k8s::socket_name(Resource::kCompute)));
  struct stat memory_after {};
  ASSERT_EQ(::stat((dir_.path() / k8s::socket_name(Resource::kMemory)).c_str(), &memory_after), 0);
  EXPECT_EQ(memory_after.st_ino, memory_before.st_ino);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few rounds: nothing more
  EXPECT_EQ(kubelet_.registered(7).size(), 7u);

  // The gpu-server goes: every device Unhealthy. It comes back without the tenants added at
  // run time: the plugin adds its grant's tenant again, with the same token.
  server_.stop();
  // (Its devices stay listed: the one grant's 128, Unhealthy; no free ones.)
  EXPECT_TRUE(eventually([&] {
    const auto now = devices(Resource::kMemory);
    return now.size() == 128 && std::all_of(now.begin(), now.end(),
                                            [](const auto& d) { return d.second == "Unhealthy"; });
  }));
  ASSERT_TRUE(server_.start().is_ok());
  EXPECT_TRUE(eventually([&] { return tenants().size() == 1; }));
  EXPECT_TRUE(eventually([&] { return healthy(Resource::kMemory) == 2048u; }));
  {
    ChildProcess probe(CAP_PROBE, {"linear", "16"}, container_env({resp}, "again"));
    const std::string line = probe.line();
    EXPECT_EQ(line.rfind("blocks 2 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
    probe.wait();
  }

  // The plugin restarts: it reads its grants back, keeps the tenant, and removes one of its
  // node's tenants that no grant names (left by a crash between adding it and saving it).
  plugin->stop();
  plugin.reset();
  {
    client::ControlOptions c;
    c.server = server_.address().to_string();
    c.token = "admin-secret";
    std::unique_ptr<client::ControlClient> cc;
    ASSERT_TRUE(client::ControlClient::connect(c, &cc).is_ok());
    std::string body;
    ASSERT_TRUE(cc->request("tenant-add",
                            R"({"name":"k8s-node-a-00000000000000aa","token":"orphan-token"})",
                            &body)
                    .is_ok())
        << body;
  }
  EXPECT_EQ(tenants().size(), 2u);
  plugin = std::make_unique<k8s::Plugin>(options());
  ASSERT_TRUE(plugin->start().is_ok());
  EXPECT_TRUE(eventually([&] { return tenants().size() == 1; }));
  EXPECT_EQ(tenants().count("k8s-node-a-00000000000000aa"), 0u);
  // Its grant still holds: the same IDs are advertised, the room is what is left.
  const auto now = devices(Resource::kMemory);
  EXPECT_EQ(now.size(), 2048u);
  for (const auto& id : ids) EXPECT_TRUE(now.count(id)) << id;
  // The kubelet gives the same IDs out again (their pod finished, pod-resources not told yet):
  // the old grant ends, its tenant goes, a new one is made.
  const std::string old_tenant = tenants().begin()->first;
  ASSERT_TRUE(allocate(Resource::kMemory, ids, &resp).ok());
  {
    const auto t = tenants();
    ASSERT_EQ(t.size(), 1u);
    EXPECT_NE(t.begin()->first, old_tenant);
  }
  // IDs asked twice in one request, or never advertised, are refused.
  grpc::Status s = allocate(Resource::kMemory, {"m1", "m1"}, &resp);
  EXPECT_FALSE(s.ok());
  s = allocate(Resource::kMemory, {"bogus"}, &resp);
  EXPECT_NE(s.error_message().find("is not a cuwire.io/gpu-memory device"), std::string::npos)
      << s.error_message();
  plugin->stop();
}

// The program as a DaemonSet runs it: its options, registration, an allocation, SIGTERM.
TEST_F(K8sPluginTest, TheProgramServesWithItsOptions) {
  ASSERT_TRUE(server_.ok());
  const std::string token = dir_.file("admin.token");
  {
    std::ofstream f(token);
    f << "admin-secret\n";
  }
  {
    ChildProcess bad(K8S_PLUGIN, {"--server", server_.address().to_string(), "--admin-token-file",
                                  dir_.file("missing.token")});
    EXPECT_EQ(bad.wait(), 2);
  }
  ChildProcess plugin(K8S_PLUGIN, {"--server",
                                   server_.address().to_string(),
                                   "--advertise",
                                   "tls:gpu-server.example:7740",
                                   "--admin-token-file",
                                   token,
                                   "--device-plugin-dir",
                                   dir_.path().string(),
                                   "--pod-resources-socket",
                                   (dir_.path() / "pod-resources.sock").string(),
                                   "--state-dir",
                                   dir_.file("program-state"),
                                   "--node",
                                   "node-b",
                                   "--client-lib-dir",
                                   dir_.path().string(),
                                   "--memory-granularity",
                                   "256MiB",
                                   "--interval",
                                   "0.1"});
  ASSERT_EQ(kubelet_.registered(3).size(), 3u);
  ASSERT_TRUE(eventually([&] { return healthy(Resource::kMemory) == 2048u; }));
  const auto ids = pick(Resource::kMemory, 512);
  kubelet_.set_containers({{{"cuwire.io/gpu-memory", ids}}});
  v1beta1::ContainerAllocateResponse resp;
  ASSERT_TRUE(allocate(Resource::kMemory, ids, &resp).ok());
  EXPECT_EQ(resp.envs().at("CUWIRE_SERVER"), "tls:gpu-server.example:7740");
  bool found = false;
  const json u = usage();
  for (const auto& g : u["gpus"]) {
    for (const auto& t : g["tenants"]) {
      if (t["tenant"].get<std::string>().rfind("k8s-node-b-", 0) == 0) {
        found = true;
        EXPECT_EQ(t["memory_cap"].get<uint64_t>(), uint64_t{512} << 20);
      }
    }
  }
  EXPECT_TRUE(found);
  // 128 MiB is not a multiple of its --memory-granularity.
  grpc::Status s =
      allocate(Resource::kMemory, pick(Resource::kMemory, 128, {ids.begin(), ids.end()}), &resp);
  EXPECT_NE(s.error_message().find("multiples of 256 MiB"), std::string::npos) << s.error_message();
  plugin.signal(SIGTERM);
  EXPECT_EQ(plugin.wait(), 0);
  // Its sockets are gone with it.
  EXPECT_FALSE(fs::exists(dir_.path() / k8s::socket_name(Resource::kMemory)));
}

}  // namespace
}  // namespace cuwire::testing
