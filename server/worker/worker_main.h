// The worker process (design decision 14): `gpu-server --worker FD`, started by the front
// (worker_pool.h) with its channel on FD. It takes its settings and its tenant's ledger, makes
// the backend, says it is ready, then serves each session the front hands it on the client's
// own socket, each on a thread of its own, until the front tells it to quit or goes away.
#pragma once

namespace cuwire::server {

// Runs the worker on channel descriptor `fd`; the process's exit status.
int worker_main(int fd);

}  // namespace cuwire::server
