// The tenant's token, and the server it is good for, as every client of cuwire finds them
// (libcuda.so.1, libnvidia-ml.so.1, the cuwire CLI).
#pragma once

#include <string>

namespace cuwire::client {

struct Credentials {
  std::string token;
  // The server the token is good for where a grant directory names it (its `server` file,
  // beside its `token`: cuwire-k8s-plugin writes both, and rewrites both when it joins a
  // container's grants into one tenant, possibly on another server). It goes before
  // CUWIRE_SERVER, which the kubelet may have set from another grant. Empty: none named.
  std::string server;
};

// The token: CUWIRE_TOKEN; else the first line of the file CUWIRE_TOKEN_FILE names; else, where
// CUWIRE_TOKEN_DIR names a directory (cuwire-k8s-plugin mounts one grant directory per resource
// there), the first line of the first of its memory/token, compute/token, gpu/token that exists,
// and the first line of the `server` file beside it, if there is one. Empty when none is set. A
// named file that cannot be read is said on stderr, and the token is empty (the server then
// refuses the connection with why).
Credentials credentials_from_environment();
// credentials_from_environment().token
std::string token_from_environment();

}  // namespace cuwire::client
