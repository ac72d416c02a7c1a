// The tenant's token, as every client of cuwire finds it (libcuda.so.1, libnvidia-ml.so.1).
#pragma once

#include <string>

namespace cuwire::client {

// CUWIRE_TOKEN; else the first line of the file CUWIRE_TOKEN_FILE names; else, where
// CUWIRE_TOKEN_DIR names a directory (cuwire-k8s-plugin mounts one grant directory per resource
// there), the first line of the first of its memory/token, compute/token, gpu/token that exists.
// Empty when none is set. A named file that cannot be read is said on stderr, and the token is
// empty (the server then refuses the connection with why).
std::string token_from_environment();

}  // namespace cuwire::client
