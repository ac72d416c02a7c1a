// Tokens passed between processes as file descriptors: a sealed memfd holding a few bytes
// (what a shareable handle of memory or of a memory pool is here, where the driver's would
// be a descriptor of its own). Sealed, its bytes can no longer change or grow.
#pragma once

#include <cstddef>

namespace cuwire {

// A new sealed memfd holding the n bytes at `bytes`; -1 on failure. An inheritable one stays
// open across exec (an app's own descriptor, which it may hand to a program it runs); else it
// is close-on-exec (a server's).
int make_sealed_fd(const char* name, const void* bytes, size_t n, bool inheritable);

// Reads the n bytes a descriptor holds into `bytes`: false when fd is no descriptor, or when
// its size is not n.
bool read_sealed_fd(int fd, void* bytes, size_t n);

}  // namespace cuwire
