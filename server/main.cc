// gpu-server: serves CUDA driver calls from cuwire clients on a GPU host (or on the sim
// backend where there is no GPU).

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "server.h"

int main(int argc, char** argv) {
  using namespace cuwire;
  using namespace cuwire::server;

  CLI::App app{"gpu-server: CUDA API remoting server of cuwire"};
  std::vector<std::string> listen;
  std::string backend = "auto", sim_memory = "16GiB", log_level = "info", token;
  std::string tls_cert, tls_key, max_message = "1MiB", max_bulk = "2GiB", ready_file;
  int sim_gpus = 1;
  SimOptions sim_defaults;
  uint64_t sim_budget = sim_defaults.instruction_budget;
  int sim_max_streams = sim_defaults.max_streams_per_context;
  app.add_option("--listen", listen, "address to serve: unix:PATH, tcp:HOST:PORT, tls:HOST:PORT "
                                     "(repeatable)")->required();
  app.add_option("--backend", backend, "auto, sim or cuda")->capture_default_str();
  app.add_option("--sim-gpus", sim_gpus, "simulated devices (sim backend)")->capture_default_str();
  app.add_option("--sim-memory", sim_memory, "memory per simulated device, e.g. 8GiB")
      ->capture_default_str();
  app.add_option("--sim-instruction-budget", sim_budget,
                 "thread-instructions one sim kernel launch may run before it fails with "
                 "CUDA_ERROR_LAUNCH_TIMEOUT (0 = no limit)")
      ->capture_default_str();
  app.add_option("--sim-max-streams", sim_max_streams, "streams per sim context")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain for tls: listeners");
  app.add_option("--tls-key", tls_key, "PEM private key for tls: listeners");
  app.add_option("--token", token, "token every client must present (CUWIRE_TOKEN)");
  app.add_option("--max-message", max_message, "largest control message accepted")
      ->capture_default_str();
  app.add_option("--max-bulk", max_bulk, "largest bulk payload in one frame")
      ->capture_default_str();
  app.add_option("--ready-file", ready_file, "write the bound addresses here once serving");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ gpu-server: %v");

  ServerConfig cfg;
  for (const auto& text : listen) {
    Address a;
    if (Status s = parse_address(text, &a); !s) {
      std::fprintf(stderr, "gpu-server: %s\n", s.message().c_str());
      return 2;
    }
    cfg.listen.push_back(a);
  }
  uint64_t v = 0;
  for (auto [text, what] : {std::pair{&sim_memory, "--sim-memory"},
                            std::pair{&max_message, "--max-message"},
                            std::pair{&max_bulk, "--max-bulk"}}) {
    if (Status s = parse_size(*text, &v); !s) {
      std::fprintf(stderr, "gpu-server: %s: %s\n", what, s.message().c_str());
      return 2;
    }
    if (text == &sim_memory) cfg.sim.memory_bytes = v;
    if (text == &max_message) {
      if (v < 4096 || v > (1u << 30)) {
        std::fprintf(stderr, "gpu-server: --max-message must be between 4KiB and 1GiB\n");
        return 2;
      }
      cfg.session.limits.max_message_bytes = static_cast<uint32_t>(v);
    }
    if (text == &max_bulk) cfg.session.limits.max_bulk_bytes = v;
  }
  cfg.backend = backend;
  cfg.sim.gpus = sim_gpus;
  cfg.sim.instruction_budget = sim_budget;
  cfg.sim.max_streams_per_context = sim_max_streams;
  cfg.tls = {tls_cert, tls_key};
  cfg.session.token = token;
  char host[256] = "gpu-server";
  gethostname(host, sizeof host - 1);
  cfg.session.server_name = host;

  std::signal(SIGPIPE, SIG_IGN);
  // Block the stop signals in every thread (threads inherit the mask) and wait for them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  Server server(cfg);
  if (Status s = server.start(); !s) {
    std::fprintf(stderr, "gpu-server: %s\n", s.message().c_str());
    return 1;
  }
  if (!ready_file.empty()) {
    std::string tmp = ready_file + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      for (const auto& a : server.addresses()) std::fprintf(f, "%s\n", a.to_string().c_str());
      std::fclose(f);
      std::rename(tmp.c_str(), ready_file.c_str());
    }
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {}: stopping", sig);
  server.stop();
  return 0;
}
