// cuwire-k8s-plugin: a kubelet device plugin (deviceplugin.proto, API v1beta1) that sells the
// room on gpu-servers' GPUs as three extended resources: cuwire.io/gpu-memory (MiB),
// cuwire.io/gpu-compute (percent) and cuwire.io/gpu (whole cards); docs/kubernetes.md.
//
// Life of a grant:
//   - Allocate (per container, per resource): the amount is checked against the granularity, the
//     ledger places it on the GPU with the most room, a tenant for it is added on that GPU's
//     gpu-server (admin API tenant-add, pinned to the GPU, with a fresh random token) and its
//     token written to <state>/grants/<id>/token. The answer mounts that directory read-only at
//     /var/run/cuwire/<memory|compute|gpu>, the client library directory at
//     --container-lib-dir, and sets CUWIRE_SERVER, CUWIRE_TOKEN_DIR and LD_LIBRARY_PATH: an
//     unchanged image's CUDA programs run through cuwire within the grant's caps.
//   - PreStartContainer: the kubelet allocates each resource separately and says nothing of
//     which container asked, so a container asking for memory and compute first gets two
//     tenants. Before it starts, the plugin asks the kubelet's pod-resources API which grants
//     the container holds and joins them: one tenant with both caps on one GPU, its token
//     written into every grant's directory.
//   - Gone: grants whose devices no container holds any more (pod-resources, after a grace
//     period) have their tenants removed.
// Restarts: the grants are kept in the state directory; on start the plugin reads them, adds
// again the tenants a restarted gpu-server lost, and removes the tenants of its node that no
// grant names. When the kubelet restarts (it deletes the device-plugin sockets), the plugin
// serves its sockets again and registers anew. A gpu-server that does not answer makes its
// devices Unhealthy until it does.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "k8s-plugin/ledger.h"
#include "protocol/status.h"

namespace cuwire::k8s {

struct ServerEndpoint {
  std::string admin;   // where the plugin reaches the server's admin API
  std::string client;  // what containers are told (CUWIRE_SERVER); empty: `admin`
};

struct PluginOptions {
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::vector<ServerEndpoint> servers;
  std::string admin_token;
  std::string ca_file;  // for tls: servers
  std::string state_dir = "/var/lib/cuwire/k8s";
  std::string client_lib_dir;  // on the host; empty: no library mount
  std::string container_lib_dir = "/usr/local/cuwire/lib";
  std::string container_token_dir = "/var/run/cuwire";
  std::string node;  // tenants are named k8s-<node>-<grant>
  LedgerOptions ledger;
  std::chrono::milliseconds interval{5000};  // refresh, socket and pod-resources checks
  std::chrono::milliseconds reap_grace{60'000};
};

class Plugin {
 public:
  explicit Plugin(PluginOptions options);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // Reads the state, reconciles with the servers, serves the sockets and registers with the
  // kubelet, then keeps watching on a thread of its own until stop(). A kubelet that is not
  // there yet is waited for (registration is tried on each interval).
  Status start();
  void stop();

  // Rounds in which the plugin registered resources with a kubelet (tests, logs).
  int registrations() const;

 private:
  friend class DeviceService;  // the kubelet's calls, served by plugin.cc
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The node's name in its tenants' names: "abc.example" -> "abc.example". A name of more than 40
// characters, or with any but letters, digits, '.' and '-' (each made '-'), becomes 31 of its
// characters and 8 hex digits of the whole name, so two nodes never come out alike.
std::string node_label(const std::string& host);

}  // namespace cuwire::k8s
