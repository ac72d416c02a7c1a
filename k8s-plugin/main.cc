// cuwire-k8s-plugin: the kubelet device plugin (plugin.h; docs/kubernetes.md).
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "k8s-plugin/plugin.h"
#include "protocol/secret_file.h"
#include "protocol/size.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

bool mib_of(const std::string& text, uint64_t* mib, std::string* error) {
  uint64_t bytes = 0;
  if (cuwire::Status s = cuwire::parse_size(text, &bytes); !s) {
    *error = s.message();
    return false;
  }
  if (bytes == 0 || bytes % (1ull << 20) != 0) {
    *error = "'" + text + "' is not a whole number of MiB";
    return false;
  }
  *mib = bytes >> 20;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cuwire-k8s-plugin: advertises the room on gpu-servers' GPUs to the kubelet as "
      "cuwire.io/gpu-memory (MiB), cuwire.io/gpu-compute (percent) and cuwire.io/gpu "
      "(whole cards), and makes a tenant for each container given some"};
  cuwire::k8s::PluginOptions o;
  std::vector<std::string> servers, advertise;
  std::string token_file, memory_unit = "1MiB", memory_granularity = "128MiB", node;
  int compute_granularity = 5;
  double interval = 5, grace = 60;
  std::string log_level = "info";
  app.add_option("--server", servers,
                 "a gpu-server's address as the plugin reaches it (repeat for several; the "
                 "node's own first)")
      ->required();
  app.add_option("--advertise", advertise,
                 "the address containers are told for each --server, in the same order "
                 "(default: the --server address)");
  app.add_option("--admin-token-file", token_file, "the gpu-servers' admin token")->required();
  app.add_option("--ca", o.ca_file, "CA file for tls: servers");
  app.add_option("--device-plugin-dir", o.device_plugin_dir,
                 "the kubelet's device-plugin directory (kubelet.sock)")
      ->capture_default_str();
  app.add_option("--pod-resources-socket", o.pod_resources_socket,
                 "the kubelet's pod-resources API, to join a container's grants and release "
                 "those of containers gone")
      ->capture_default_str();
  app.add_option("--state-dir", o.state_dir, "where grants and their tokens are kept")
      ->capture_default_str();
  app.add_option("--client-lib-dir", o.client_lib_dir,
                 "host directory with libcuda.so.1 and libnvidia-ml.so.1 to mount into "
                 "containers (none: the image brings its own)");
  app.add_option("--container-lib-dir", o.container_lib_dir,
                 "where containers see --client-lib-dir (put first on LD_LIBRARY_PATH)")
      ->capture_default_str();
  app.add_option("--container-token-dir", o.container_token_dir,
                 "where containers see their grants' tokens (CUWIRE_TOKEN_DIR)")
      ->capture_default_str();
  app.add_option("--node", node, "this node's name in tenant names (default: the host name)");
  app.add_option("--memory-unit", memory_unit,
                 "memory per cuwire.io/gpu-memory device; pods ask in these units")
      ->capture_default_str();
  app.add_option("--memory-granularity", memory_granularity, "memory grants are multiples of this")
      ->capture_default_str();
  app.add_option("--compute-granularity", compute_granularity,
                 "compute grants are multiples of this many percent")
      ->capture_default_str();
  app.add_option("--interval", interval, "seconds between looks at the servers and the kubelet")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  app.add_option("--release-grace", grace,
                 "seconds a new grant is kept before a container must be seen holding it")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  app.set_version_flag("--version", std::string("cuwire-k8s-plugin ") + CUWIRE_VERSION);
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!advertise.empty() && advertise.size() != servers.size()) {
    std::fprintf(stderr, "cuwire-k8s-plugin: --advertise must be given once per --server\n");
    return 2;
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    o.servers.push_back({servers[i], advertise.empty() ? "" : advertise[i]});
  }
  {
    std::string error;
    if (!cuwire::read_first_line(token_file, &o.admin_token, &error) || o.admin_token.empty()) {
      error = error.empty() ? "no token on the first line of " + token_file
                            : "cannot read " + token_file + ": " + error;
      std::fprintf(stderr, "cuwire-k8s-plugin: the admin token: %s\n", error.c_str());
      return 2;
    }
  }
  std::string error;
  if (!mib_of(memory_unit, &o.ledger.memory_unit_mib, &error) ||
      !mib_of(memory_granularity, &o.ledger.memory_granularity_mib, &error)) {
    std::fprintf(stderr, "cuwire-k8s-plugin: %s\n", error.c_str());
    return 2;
  }
  o.ledger.compute_granularity = compute_granularity;
  if (node.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    node = host;
  }
  o.node = cuwire::k8s::node_label(node);
  o.interval = std::chrono::milliseconds(static_cast<long long>(interval * 1000));
  o.reap_grace = std::chrono::milliseconds(static_cast<long long>(grace * 1000));

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  cuwire::k8s::Plugin plugin(o);
  if (cuwire::Status s = plugin.start(); !s) {
    std::fprintf(stderr, "cuwire-k8s-plugin: %s\n", s.message().c_str());
    return 1;
  }
  while (!g_stop) ::usleep(100'000);
  spdlog::info("stopping");
  plugin.stop();
  return 0;
}
