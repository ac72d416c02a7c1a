// cuwire: the user's command line. `cuwire run -- CMD ARGS...` runs an unmodified CUDA program
// with cuwire's libcuda.so.1 (and libnvidia-ml.so.1) in place of the driver's; `cuwire gpus`,
// `sessions`, `stats`, `top`, `tenant set` and `evict` are the admin API (admin_cli.h).

#include <cuda.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "client-lib/cli/admin_cli.h"
#include "protocol/address.h"

namespace {

namespace fs = std::filesystem;

// The directory holding cuwire's libcuda.so.1: installed (PREFIX/lib/cuwire next to
// PREFIX/bin/cuwire) or in a build tree (BUILD/lib next to BUILD/client-lib/cuwire).
std::string find_library_dir() {
  if (const char* d = std::getenv("CUWIRE_LIBRARY_DIR")) return d;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path bin = exe.parent_path();
  for (fs::path cand : {bin.parent_path() / "lib" / "cuwire",
                        bin.parent_path() / "lib64" / "cuwire", bin.parent_path() / "lib"}) {
    if (fs::exists(cand / "libcuda.so.1", ec)) return cand.string();
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuwire: run CUDA programs on a remote gpu-server"};
  app.set_version_flag("--version", std::string("cuwire ") + CUWIRE_VERSION + " (CUDA " +
                                        std::to_string(CUDA_VERSION / 1000) + "." +
                                        std::to_string(CUDA_VERSION % 1000 / 10) + " driver API)");
  app.require_subcommand(1);

  auto* run = app.add_subcommand("run",
                                 "run CMD with cuwire's libcuda.so.1 and libnvidia-ml.so.1 "
                                 "in place of the driver's");
  std::string server, token, ca;
  std::vector<std::string> command;
  run->add_option("--server", server,
                  "gpu-server address, or several separated by commas to "
                  "choose among by their room (default: $CUWIRE_SERVER, "
                  "else unix:/tmp/cuwire.sock)");
  run->add_option("--token", token, "token for the server (default: $CUWIRE_TOKEN)");
  run->add_option("--ca", ca, "CA file for tls: servers (default: $CUWIRE_CA)");
  run->add_option("command", command, "the program and its arguments, after --")->required();

  cuwire::client::AdminCommands admin;
  cuwire::client::add_admin_commands(app, &admin);

  CLI11_PARSE(app, argc, argv);
  if (admin.run) {
    try {
      return admin.run();
    } catch (const std::exception& e) {  // an answer of unexpected shape (another version)
      std::fprintf(stderr, "cuwire: cannot read the server's answer: %s\n", e.what());
      return 1;
    }
  }

  if (!server.empty()) {
    // Checked here so that a typo stops before the program runs; the client library reads
    // the same list (parse_address_list) and chooses among several.
    std::vector<cuwire::ListedAddress> list;
    if (cuwire::Status s = cuwire::parse_address_list(server, &list); !s) {
      std::fprintf(stderr, "cuwire: %s\n", s.message().c_str());
      return 2;
    }
    setenv("CUWIRE_SERVER", server.c_str(), 1);
  }
  if (!token.empty()) setenv("CUWIRE_TOKEN", token.c_str(), 1);
  if (!ca.empty()) setenv("CUWIRE_CA", ca.c_str(), 1);

  std::string libdir = find_library_dir();
  if (libdir.empty()) {
    std::fprintf(stderr, "cuwire: cannot find cuwire's libcuda.so.1 (set CUWIRE_LIBRARY_DIR)\n");
    return 2;
  }
  std::string path = libdir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  // NVRTC's CUBINs on the sim (nvrtc_shim.cc): after whatever is preloaded already (a
  // sanitizer's runtime must stay first).
  std::error_code ec;
  if (const fs::path shim = fs::path(libdir) / "libcuwire_nvrtc.so"; fs::exists(shim, ec)) {
    std::string preload = shim.string();
    if (const char* old = std::getenv("LD_PRELOAD"); old && *old) {
      preload = std::string(old) + ":" + preload;
    }
    setenv("LD_PRELOAD", preload.c_str(), 1);
  }

  std::vector<char*> args;
  for (auto& c : command) args.push_back(c.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "cuwire: cannot run %s: %s\n", args[0], std::strerror(errno));
  return 127;
}
