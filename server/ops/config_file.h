// gpu-server --config FILE: the server's settings and its tenants in TOML.
//
//   [server]
//   listen = ["unix:/run/cuwire/gpu.sock", "tls:0.0.0.0:7740"]
//   socket_mode = "0660"      # optional: the unix: sockets' mode, and their group (a name
//   socket_group = "cuwire"   #   or a number), set before anyone can connect
//   backend = "auto"          # auto | cuda | sim     (also: driver, device_printf, busy_time,
//   shm_lane, tls_cert, placement = "spread"      # spread | binpack        tls_key, token_file,
//   log_level, max_sessions_per_gpu = 8  # optional                allow_insecure, max_connections,
//   metrics = "127.0.0.1:9400"  # optional: /metrics
//   isolation = "tenant"      # auto | tenant | session | none: sessions in worker processes
//   worker_idle = "60s"       #   (design decision 14); an idle tenant worker is let go after
//   worker_timeout = "10s"    #   worker_idle, a worker silent for worker_timeout is killed
//   open = false              # optional: without [[tenant]], serve only tenants added at run
//                             # time instead of everyone (cuwire tenant add, the k8s plugin)
//   admin_token_file = "/etc/cuwire/admin.token"  # optional: the admin API (admin.h); or
//                                                 # admin_token = "...", admin_token_sha256
//                                                       max_sessions, max_handshakes_per_peer,
//                                                       handshake_timeout, idle_timeout,
//                                                       drain_timeout, context_memory:
//                                                       as the flags)
//   [sim]
//   gpus = 2                  # also: instruction_budget, max_streams
//   memory = "16GiB"
//   [[tenant]]
//   name = "alice"
//   token_file = "/etc/cuwire/alice.token"   # or token = "...", or token_sha256 = "hex"
//   uids = [1000, 1001]       # optional: Unix-socket peers of these uids that send no token
//                             # are this tenant (then the token is optional); one tenant each
//   memory = "8GiB"           # bytes, KiB/MiB/GiB/TiB, or a fraction of the card such as 0.25
//   compute = 30              # integer percent 1-100
//   gpus = [0]
//   max_sessions = 4
//   placement = "binpack"     # optional: the server's otherwise
//   borrow = false            # a compute-capped tenant may use GPU time nobody else wants
//   sms = 16                  # optional: SMs of each GPU of its own (sm_partition.h)
//
// Flags given on the command line override the file. Anything the file gets wrong (an unknown
// key, a bad unit, compute over 100, capped compute on one GPU summing over 100, a duplicate
// tenant name, token or uid) is refused with the file's name, the line and the reason.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/status.h"
#include "server/tenancy/tenants.h"

namespace cuwire::server {

struct FileConfig {
  // [server]
  std::optional<std::vector<std::string>> listen;
  std::optional<std::string> backend, driver, placement, device_printf, busy_time, shm_lane,
      tls_cert, tls_key, token_file, log_level, handshake_timeout, idle_timeout, drain_timeout,
      metrics, socket_mode, socket_group, context_memory, isolation, worker_idle, worker_timeout;
  std::optional<bool> allow_insecure;
  // open = false: no [[tenant]] does not make the server open; it serves only the tenants added
  // at run time (cuwire tenant add, cuwire-k8s-plugin). A file with tenants may not say true.
  std::optional<bool> open;
  std::optional<int64_t> max_connections, max_sessions, max_handshakes_per_peer,
      max_sessions_per_gpu;
  // admin_token_file, admin_token or admin_token_sha256: the admin API's (admin.h).
  std::optional<std::array<uint8_t, 32>> admin_token_sha256;
  // [sim]
  std::optional<int64_t> sim_gpus, sim_max_streams, sim_threads;
  std::optional<uint64_t> sim_instruction_budget;
  std::optional<std::string> sim_memory, sim_profile;
  // [[tenant]]
  std::vector<TenantSpec> tenants;
};

// Parses `text` (named `name` in messages, with its line numbers). Relative token_file paths
// are read relative to the working directory.
Status parse_config(std::string_view text, const std::string& name, FileConfig* out);
Status load_config_file(const std::string& path, FileConfig* out);

// What gpu-server --check-config looks at beyond what parse_config refuses, on a file that
// parsed (`file`, read from `path`): refuses files of secrets (admin_token_file, token_file,
// tls_key, the tenants' token_file) that every user may read, and, where the file says what
// the GPUs are (backend = "sim": [sim] gpus, memory; 40 SMs each), a memory cap larger than a
// GPU, SM partitions (sms) that do not fit a GPU, and gpus naming a GPU that is not there.
// Adds to *warnings (explained, not refused) memory caps that add up to more than a GPU.
Status check_config_further(const std::string& path, const FileConfig& file,
                            std::vector<std::string>* warnings);
// A tenant added at run time (`cuwire tenant add`), from the fields the admin gave, checked as
// a [[tenant]] table of the config file is (alone: the server checks it against its other
// tenants). `memory` is a size ("4096MiB"), a share ("0.25", "25%") or absent.
struct TenantFields {
  std::string name;
  std::optional<std::string> token, memory, placement;
  std::optional<int64_t> compute, sms, max_sessions;
  std::optional<std::vector<int64_t>> gpus;
  std::optional<bool> borrow;
};
Status tenant_from_fields(const TenantFields& fields, TenantSpec* out);

// The first line of a token file, trailing blanks dropped (an empty one is refused). `what`
// names the setting that gave the path, in messages.
Status read_token_file(const std::string& path, std::string* token,
                       const std::string& what = "token_file");

}  // namespace cuwire::server
