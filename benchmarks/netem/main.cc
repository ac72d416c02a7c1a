// cuwire-netem: a network you can dial, for the benchmarks (netem.h).
//
//   cuwire-netem --listen tcp:127.0.0.1:7001 --to unix:/tmp/cuwire.sock --profile 25gbe
//       forwards every connection to 7001 on to the server through a 25 GbE-class link
//       (CUWIRE_SERVER=tcp:127.0.0.1:7001 then reaches the server over it); until SIGINT/TERM.
//   cuwire-netem --measure [--profile NAME | --rtt 25us --bandwidth 25Gbit] [--json]
//       what the link delivers on this machine against what was asked: a 4-byte ping-pong's
//       round trips and a bulk transfer, each beside the same over plain loopback TCP.
#include <CLI/CLI.hpp>

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "benchmarks/netem/netem.h"
#include "protocol/size.h"

int main(int argc, char** argv) {
  using cuwire::netem::LinkSpec;
  CLI::App app{
      "cuwire-netem: forwards TCP connections through an emulated link (a one-way delay of "
      "RTT/2 and a bandwidth, each direction), or measures what such a link delivers here"};
  std::string listen, to, profile, rtt, bandwidth, bulk = "256MiB";
  bool measure = false, json = false;
  int round_trips = 2000;
  std::string profiles;
  for (const auto& p : cuwire::netem::profile_names())
    profiles += (profiles.empty() ? "" : ", ") + p;
  app.add_option("--listen", listen, "where to accept connections (tcp:HOST:PORT or unix:PATH)");
  app.add_option("--to", to, "where to forward them (tcp:HOST:PORT or unix:PATH)");
  app.add_option("--profile", profile, "a link: " + profiles);
  app.add_option("--rtt", rtt, "round-trip time added (25us, 0.2ms)");
  app.add_option("--bandwidth", bandwidth, "each direction's rate (25Gbit, 800Mbit, 3GB/s)");
  std::string idle_spin;
  app.add_option("--idle-spin", idle_spin,
                 "spin this long after bytes moved rather than sleep (default 200us; 0: sleep "
                 "at once, sparing a core, adding a wake-up to each round trip)");
  app.add_flag("--measure", measure, "measure the link's round trip and bandwidth here");
  app.add_option("--round-trips", round_trips, "ping-pongs measured (--measure)")
      ->check(CLI::Range(10, 10'000'000));
  app.add_option("--bulk", bulk, "bytes of the bulk transfer (--measure; 0: none)");
  app.add_flag("--json", json, "--measure: one JSON object");
  CLI11_PARSE(app, argc, argv);

  LinkSpec link;
  if (!profile.empty()) {
    if (!cuwire::netem::profile(profile, &link)) {
      std::fprintf(stderr, "cuwire-netem: no profile '%s' (%s)\n", profile.c_str(),
                   profiles.c_str());
      return 2;
    }
  }
  if (!rtt.empty() && !cuwire::netem::parse_duration(rtt, &link.rtt)) {
    std::fprintf(stderr, "cuwire-netem: --rtt %s is not a duration such as 25us\n", rtt.c_str());
    return 2;
  }
  if (!bandwidth.empty() && !cuwire::netem::parse_rate(bandwidth, &link.bits_per_second)) {
    std::fprintf(stderr, "cuwire-netem: --bandwidth %s is not a rate such as 25Gbit\n",
                 bandwidth.c_str());
    return 2;
  }
  if (!idle_spin.empty() && !cuwire::netem::parse_duration(idle_spin, &link.idle_spin)) {
    std::fprintf(stderr, "cuwire-netem: --idle-spin %s is not a duration such as 200us\n",
                 idle_spin.c_str());
    return 2;
  }
  if (!rtt.empty() || !bandwidth.empty()) link.name.clear();

  if (measure) {
    uint64_t bulk_bytes = 0;
    if (cuwire::Status s = cuwire::parse_size(bulk, &bulk_bytes); !s) {
      std::fprintf(stderr, "cuwire-netem: --bulk: %s\n", s.message().c_str());
      return 2;
    }
    cuwire::netem::Fidelity f;
    if (cuwire::Status s = cuwire::netem::measure(link, round_trips, bulk_bytes, &f); !s) {
      std::fprintf(stderr, "cuwire-netem: %s\n", s.message().c_str());
      return 1;
    }
    const double asked_rtt = std::chrono::duration<double, std::micro>(link.rtt).count();
    const double asked_gbit = link.bits_per_second / 1e9;
    if (json) {
      std::printf(
          "{\"profile\": \"%s\", \"asked_rtt_us\": %.3f, \"asked_gbit\": %.3f, "
          "\"round_trips\": %d, \"direct_rtt_p50_us\": %.3f, \"rtt_p50_us\": %.3f, "
          "\"rtt_p99_us\": %.3f, \"rtt_mean_us\": %.3f, \"bulk_bytes\": %llu, "
          "\"direct_gbit\": %.3f, \"gbit\": %.3f}\n",
          link.name.c_str(), asked_rtt, asked_gbit, f.round_trips, f.direct_rtt_p50_us,
          f.rtt_p50_us, f.rtt_p99_us, f.rtt_mean_us, static_cast<unsigned long long>(f.bulk_bytes),
          f.direct_gbit, f.gbit);
    } else {
      std::printf("link: %s\n", cuwire::netem::describe(link).c_str());
      std::printf(
          "round trip (4 bytes, p50): %.1f us through the link (asked %.1f), %.1f us "
          "direct; p99 %.1f us\n",
          f.rtt_p50_us, asked_rtt, f.direct_rtt_p50_us, f.rtt_p99_us);
      if (f.bulk_bytes > 0) {
        std::printf("bandwidth: %.2f Gbit/s through the link (asked %s), %.2f Gbit/s direct\n",
                    f.gbit,
                    asked_gbit > 0 ? std::to_string(asked_gbit).substr(0, 6).c_str() : "unlimited",
                    f.direct_gbit);
      }
    }
    return 0;
  }

  if (listen.empty() || to.empty()) {
    std::fprintf(stderr, "cuwire-netem: --listen and --to (or --measure); --help says more\n");
    return 2;
  }
  cuwire::Address from, dest;
  if (cuwire::Status s = cuwire::parse_address(listen, &from); !s) {
    std::fprintf(stderr, "cuwire-netem: --listen: %s\n", s.message().c_str());
    return 2;
  }
  if (cuwire::Status s = cuwire::parse_address(to, &dest); !s) {
    std::fprintf(stderr, "cuwire-netem: --to: %s\n", s.message().c_str());
    return 2;
  }
  // SIGINT and SIGTERM are waited for here (sigwait), blocked in every thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::unique_ptr<cuwire::netem::Emulator> em;
  if (cuwire::Status s = cuwire::netem::Emulator::start(from, dest, link, &em); !s) {
    std::fprintf(stderr, "cuwire-netem: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("cuwire-netem: %s -> %s over %s\n", em->address().to_string().c_str(),
              dest.to_string().c_str(), cuwire::netem::describe(link).c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  em->stop();
  std::printf("cuwire-netem: forwarded %llu bytes up, %llu down\n",
              static_cast<unsigned long long>(em->bytes_up()),
              static_cast<unsigned long long>(em->bytes_down()));
  return 0;
}
