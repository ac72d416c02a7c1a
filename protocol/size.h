// The one size syntax of cuwire: the config file, gpu-server's flags, the admin API and CLI,
// and cuwire-k8s-plugin read sizes through it.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/status.h"

namespace cuwire {

// Sizes like "8GiB", "8192MiB", "512MB", "1048576" (bytes): a whole number and an optional
// unit, B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB (powers of 1000), any case.
Status parse_size(const std::string& text, uint64_t* out);

}  // namespace cuwire
