// The admin commands of the `cuwire` command line: gpus, sessions, stats, top, tenant set,
// tenant add, tenant remove, evict; and smi, the caller's own view (a tenant's token: its GPUs,
// its memory of its cap, its processes). gpus and stats answer a tenant's token too, within its
// scope. Each asks gpu-server over a control connection (control_client.h; the commands and
// their answers: server/ops/admin.h) and prints a table, or with --json the server's answer.
#pragma once

#include <CLI/CLI.hpp>

namespace cuwire::client {

// Adds the admin subcommands to `app`; *run is set to the one to run after parsing.
struct AdminCommands {
  std::function<int()> run;
};
void add_admin_commands(CLI::App& app, AdminCommands* out);

}  // namespace cuwire::client
