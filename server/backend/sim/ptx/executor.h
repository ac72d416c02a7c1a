// Runs one grid of a decoded Program. Internal to the interpreter.
//
// Execution model: blocks run on the calling thread and on LaunchConfig::pool's threads, each
// taking the next block not yet started; a cooperative launch keeps every block resident and
// gives each a turn in order (ptx.h). Inside a block, threads
// form warps of 32 that run in SIMT lockstep: a warp executes the group of its lanes whose
// (call stack, pc) is smallest, lanes that diverge wait, and they merge again when the running
// group reaches their pc. For the structured control flow nvcc emits, this reconverges right
// after if/else and loops, so shfl/vote see the lanes CUDA code expects. Warps are time-sliced,
// and bar.sync releases once every non-exited thread of the block has arrived.
#pragma once

#include <string>
#include <unordered_map>

#include "server/backend/sim/ptx/program.h"
#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx {

LaunchResult RunKernel(const Program& program, const KernelInfo& kernel, const LaunchConfig& config,
                       const std::unordered_map<std::string, uint64_t>& variable_addresses,
                       GlobalMemory& memory);

}  // namespace cuwire::ptx
