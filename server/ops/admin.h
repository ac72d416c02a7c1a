// The admin API and the tenants' own view, served on control connections (cuwire.capnp:
// Hello.control) by Server::control. A request is a command and a JSON object of arguments;
// the answer is a JSON object. The `cuwire` command line (client-lib/cli/cli.cc) and
// libnvidia-ml.so.1 (client-lib/nvml/nvml.cc) are their clients.
//
// Who may ask what:
//   - the admin token ([server] admin_token_file, or admin_token / admin_token_sha256, or
//     gpu-server --admin-token-file) may ask every command;
//   - a tenant's token `view` (its own GPUs, its caps and its own processes), and `gpus` and
//     `stats` within its scope: the GPUs it may use, with its cap as their memory_total and
//     only its own use, sessions and busy time; its own figures (another tenant's: refused);
//   - on an open server (no tenants) without an admin token, anyone who may connect may also
//     ask the commands that only read (gpus, sessions, stats, usage, view): the server has no
//     tenant boundary to keep; changes (tenant-set, tenant-add, tenant-remove, evict) always
//     need the admin token.
//
// Commands (sizes in bytes, times in seconds, shares in percent):
//   gpus       {}  ->  {"backend", "backend_fallback"? (why auto chose the sim),
//                  "gpus": [{"index", "name", "uuid", "pci_bus_id",
//                  "memory_total", "memory_used", "sessions", "busy_seconds",
//                  "tenants": {name: sessions}}]}
//   sessions   {}  ->  {"sessions": [{"id", "tenant", "client", "pid", "peer", "gpu",
//                  "connected_seconds", "calls", "memory_used"}]}
//   stats      {"tenant"?}  ->  {"tenants": [{"tenant", "runtime", "sessions", "calls",
//                  "bytes_host_to_device", "bytes_device_to_host",
//                  "calls_by_name": [{"call", "count", "errors", "service": {"p50", "p99",
//                  "mean", "max"}, "queue": {"p50", "p99"}, "error_codes": {name: n}}]}]}
//   usage      {}  ->  {"time", "gpus": [{"index", "name", "memory_total", "memory_used",
//                  "tenants": [{"tenant", "runtime", "sessions", "memory_used", "memory_cap",
//                  "compute_cap", "busy_seconds", "calls", "service_buckets": [[i, n]...]}]}]}
//                  (service_buckets: the tenant's call service-time histogram on that GPU,
//                  LatencyHistogram's nonzero buckets, for percentiles over an interval)
//   tenant-set {"name", "memory"?: "8GiB" | "0.25" | "none", "compute"?: "30" | "none"}
//              ->  {"tenant", "caps": {...}, "was": {...}, "notes": [...]}: live until the
//                  next reload or restart, which read the config file again
//   tenant-add {"name", "token", "memory"?, "compute"?, "gpus"?: "0,1", "max_sessions"?,
//               "placement"?, "borrow"?}  ->  {"tenant", "caps": {...}, "notes": [...]}: served
//                  from now on, checked as a config file's [[tenant]] is ("runtime": true;
//                  a reload keeps it, a restart ends it)
//   tenant-remove {"name"}  ->  {"tenant", "sessions_evicted", "ended"}: a runtime tenant's
//                  sessions evicted (waited for up to 10 s), its token refused from then on
//   evict      {"session"}  ->  {"session", "tenant", "client", "ended"}: the session's
//                  client is told kGoingAway and everything it held is reclaimed
//   view       {}  ->  {"driver_version", "cuda_version", "gpus": [{"index", "name", "uuid",
//                  "pci_bus_id", "memory_total", "memory_used", "utilization",
//                  "compute_capability": [major, minor],
//                  "processes": [{"pid", "name", "memory_used"}]}]}: for a tenant, the GPUs
//                  it may use, its cap as the total, its own use and busy share, its own
//                  sessions; for the admin, the whole GPUs
#pragma once

#include <string>

namespace cuwire::server {

// The driver version the server reports for NVML: the host's NVIDIA kernel module's (from
// /proc/driver/nvidia/version) under the cuda backend (`backend` "cuda"); elsewhere (the sim,
// a relay) the Linux driver release of CUDA 13.0, the driver API the sim implements.
std::string reported_driver_version(const std::string& backend);

}  // namespace cuwire::server
