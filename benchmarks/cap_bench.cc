// Compute caps: how closely each mix of tenants is held to its caps, and what the scheduler
// costs a launch nobody contends with, each beside the same run without caps.
//
//   cap_bench [--seconds N]   (default 10: the window each mix is measured over)
//
// Every tenant is a compute_probe process (tests/server/compute_probe.c) on one simulated GPU of
// an in-process server: it keeps the device busy with kernels that spin for 2 ms of real time
// and record when they ran, so a tenant's share is what the device ran for it, by the device's
// clock. The launch cost is an empty kernel's launch, synchronising after every 8, by one
// tenant alone: uncapped (no scheduler), then capped at 100 percent (the scheduler admits and
// marks every launch).
//
// The shares are of a GPU whose kernels run on this machine's cores: on a loaded machine,
// wake-ups come late and every share falls a little short. Run it alone.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace {

using cuwire::testing::ChildProcess;
using cuwire::testing::TenantServer;

struct Mix {
  const char* name;
  std::vector<int> caps;  // 0: uncapped
};

double launch_ns(const std::vector<int>& caps) {
  TenantServer s(cuwire::testing::compute_mix(caps), 1);
  ChildProcess p(COMPUTE_PROBE, {"launches", "4000"}, s.env("t0"));
  const std::string line = p.line();
  double ns = 0;
  if (std::sscanf(line.c_str(), "ns_per_launch %lf", &ns) != 1 || p.wait() != 0) {
    std::fprintf(stderr, "cap_bench: compute_probe launches: '%s'\n", line.c_str());
    std::exit(1);
  }
  return ns;
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 10;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: cap_bench [--seconds N]\n");
      return 2;
    }
  }
  if (seconds < 1) seconds = 1;
  spdlog::set_level(spdlog::level::warn);
  const std::vector<Mix> mixes = {
      {"30/70", {30, 70}}, {"20/30/50", {20, 30, 50}},     {"30 + 2 uncapped", {30, 0, 0}},
      {"30 alone", {30}},  {"no caps, 2 tenants", {0, 0}},
  };
  std::printf("compute caps on one simulated GPU, %d-second window, 2 ms kernels\n\n", seconds);
  std::printf("%-20s %-7s %5s %9s %14s\n", "mix", "tenant", "cap", "share %", "error (points)");
  for (const Mix& m : mixes) {
    TenantServer s(cuwire::testing::compute_mix(m.caps), 1);
    const std::vector<double> got = cuwire::testing::measure_shares(
        COMPUTE_PROBE, s, cuwire::testing::compute_mix_tokens(m.caps.size()), seconds);
    for (size_t i = 0; i < got.size(); ++i) {
      char cap[8] = "-", err[16] = "-";
      if (m.caps[i]) {
        std::snprintf(cap, sizeof cap, "%d", m.caps[i]);
        std::snprintf(err, sizeof err, "%+.1f", got[i] - m.caps[i]);
      }
      std::printf("%-20s t%-6zu %5s %9.1f %14s\n", i == 0 ? m.name : "", i, cap, got[i], err);
    }
  }
  const double plain = launch_ns({0}), capped = launch_ns({100});
  std::printf("\nuncontended launch (empty kernel, synchronising every 8), one tenant alone:\n");
  std::printf("  no caps (no scheduler)       %8.1f us\n", plain / 1000);
  std::printf("  capped at 100%% (scheduler)   %8.1f us   %.2fx\n", capped / 1000, capped / plain);
  return 0;
}
