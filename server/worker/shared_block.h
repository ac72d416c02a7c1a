// Memory the front shares with its workers (a session's figures, a tenant's ledger, the GPUs'
// compute schedules): a memfd of fixed size that the front makes and each worker maps.
//
// The front seals it against shrinking and growing before any worker sees it: a worker that
// truncated it would otherwise make the front's next read of it fault (SIGBUS), ending the
// server. What a worker writes there is still only data to the front, which checks every
// index and count it reads before using it (design decision 11).
#pragma once

#include <cstddef>

#include "protocol/status.h"

namespace cuwire::server {

struct SharedBlock {
  int fd = -1;  // the memfd (close-on-exec), for passing to a worker
  void* base = nullptr;
  size_t bytes = 0;
};

// A new block of `bytes` zero bytes named `name`, mapped read-write and sealed against
// resizing. On failure nothing is left open.
Status create_shared_block(const char* name, size_t bytes, SharedBlock* out);

// Maps the block behind `fd` (made by create_shared_block in another process) when its size is
// within [min_bytes, max_bytes]. Takes `fd`: on failure it is closed.
Status attach_shared_block(int fd, size_t min_bytes, size_t max_bytes, SharedBlock* out);

// Unmaps the block and closes its descriptor (either may be absent).
void release_shared_block(SharedBlock* block);

}  // namespace cuwire::server
