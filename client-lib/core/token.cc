#include "client-lib/core/token.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cuwire::client {

namespace {
void say_token(const std::string& line) { std::fprintf(stderr, "cuwire: %s\n", line.c_str()); }
}  // namespace

std::string token_from_environment() {
  if (const char* t = std::getenv("CUWIRE_TOKEN"); t && *t) return t;
  auto first_line = [](const std::string& path, bool say_missing) -> std::string {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) {
      if (say_missing)
        say_token("cannot read the token file " + path + ": " + std::strerror(errno));
      return "";
    }
    char buf[512];
    std::string line;
    if (std::fgets(buf, sizeof buf, f)) line = buf;
    std::fclose(f);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
  };
  if (const char* f = std::getenv("CUWIRE_TOKEN_FILE"); f && *f) return first_line(f, true);
  if (const char* d = std::getenv("CUWIRE_TOKEN_DIR"); d && *d) {
    for (const char* kind : {"memory", "compute", "gpu"}) {
      const std::string path = std::string(d) + "/" + kind + "/token";
      if (::access(path.c_str(), F_OK) == 0) return first_line(path, true);
    }
    say_token(std::string("CUWIRE_TOKEN_DIR=") + d +
              " holds no memory/token, compute/token or gpu/token");
  }
  return "";
}

}  // namespace cuwire::client
