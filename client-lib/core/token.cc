#include "client-lib/core/token.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "protocol/secret_file.h"

namespace cuwire::client {

namespace {

void say_token(const std::string& line) { std::fprintf(stderr, "cuwire: %s\n", line.c_str()); }

// The file's first line; empty, said on stderr, when it cannot be read.
std::string first_line(const std::string& path) {
  std::string line, error;
  if (!read_first_line(path, &line, &error)) {
    say_token("cannot read the token file " + path + ": " + error);
  }
  return line;
}

}  // namespace

Credentials credentials_from_environment() {
  Credentials c;
  if (const char* t = std::getenv("CUWIRE_TOKEN"); t && *t) {
    c.token = t;
  } else if (const char* f = std::getenv("CUWIRE_TOKEN_FILE"); f && *f) {
    c.token = first_line(f);
  } else if (const char* d = std::getenv("CUWIRE_TOKEN_DIR"); d && *d) {
    bool found = false;
    for (const char* kind : {"memory", "compute", "gpu"}) {
      const std::string grant = std::string(d) + "/" + kind;
      if (::access((grant + "/token").c_str(), F_OK) != 0) continue;
      c.token = first_line(grant + "/token");
      if (::access((grant + "/server").c_str(), F_OK) == 0)
        c.server = first_line(grant + "/server");
      found = true;
      break;
    }
    if (!found) {
      say_token(std::string("CUWIRE_TOKEN_DIR=") + d +
                " holds no memory/token, compute/token or gpu/token");
    }
  }
  return c;
}

std::string token_from_environment() { return credentials_from_environment().token; }

}  // namespace cuwire::client
