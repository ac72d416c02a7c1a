// The command-line programs as a newcomer meets them: versions, and the address gpu-server
// serves without --listen being the one the client library tries without CUWIRE_SERVER.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <algorithm>
#include <string>

#include "generated/call_ids.h"
#include "protocol/address.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

std::string cuda_version() {
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
}

TEST(Cli, VersionsNameTheCudaVersion) {
  ChildProcess server(GPU_SERVER, {"--version"}, {});
  EXPECT_EQ(server.line(), std::string("gpu-server ") + CUWIRE_VERSION + " (CUDA " +
                               cuda_version() + " driver API, " + std::to_string(kManifestEntries) +
                               " calls)");
  EXPECT_EQ(server.wait(), 0);
  ChildProcess cli(CUWIRE_CLI, {"--version"}, {});
  EXPECT_EQ(cli.line(),
            std::string("cuwire ") + CUWIRE_VERSION + " (CUDA " + cuda_version() + " driver API)");
  EXPECT_EQ(cli.wait(), 0);
  // MAJOR.MINOR.PATCH
  const std::string v = CUWIRE_VERSION;
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_EQ(v.find_first_not_of("0123456789."), std::string::npos) << v;
}

// A gpu-server already serving the default address (a developer's) makes this test step aside.
bool serving(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  close(fd);
  return live;
}

TEST(Cli, ServerWithoutListenServesWhereTheClientLooks) {
#if defined(__SANITIZE_ADDRESS__)
  // vector_add is nvcc's, not instrumented: it cannot load an ASan client library. (A run of
  // this test under ASan also reported a heap-use-after-free in the standalone gpu-server as
  // it drained, not yet diagnosed: see the notes.)
  GTEST_SKIP() << "the sample program cannot load the ASan client library";
#endif
  Address a;
  ASSERT_TRUE(parse_address(kDefaultAddress, &a).is_ok());
  if (serving(a.path)) GTEST_SKIP() << "a gpu-server already serves " << a.path;
  TempDir dir;
  const std::string ready = dir.file("ready");
  // No --listen, no address for the client: they meet at kDefaultAddress.
  ChildProcess server(GPU_SERVER, {"--backend", "sim", "--ready-file", ready}, {});
  std::string first;
  for (int i = 0; i < 1000 && first.empty(); ++i) {
    std::ifstream f(ready);
    std::getline(f, first);
    if (first.empty()) usleep(10000);
  }
  EXPECT_EQ(first, kDefaultAddress);
  ChildProcess app(CUWIRE_CLI, {"run", "--", VECTOR_ADD}, {"CUWIRE_SERVER="});
  std::string line, last;
  while (!(line = app.line()).empty()) last = line;
  EXPECT_NE(last.find("results correct"), std::string::npos) << last;
  EXPECT_EQ(app.wait(), 0);
  server.signal(SIGTERM);  // a drain: the server exits cleanly
  EXPECT_EQ(server.wait(), 0);
}

}  // namespace
}  // namespace cuwire::testing
