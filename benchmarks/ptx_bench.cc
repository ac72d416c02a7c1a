// Interpreter throughput: interpreted thread-instructions per second on nvcc-compiled kernels,
// on one thread and on a worker pool of every core (the second argument: threads, as
// gpu-server --sim-threads gives them).
//
//   cmake --build build --target ptx_bench && build/benchmarks/ptx_bench
//
// The "thread_insts" counter is a rate (LaunchResult::instructions per second of wall time).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/backend/sim/ptx/ptx.h"
#include "tests/ptx/host_memory.h"

namespace cuwire::ptx {
namespace {

// Device memory over host buffers, each allocation rounded to whole 4 KiB pages.
using BenchMemory = testing::HostBufferMemory<4096>;

std::unique_ptr<Module> Load(const char* name) {
  std::string error;
  std::string text = testing::ReadFile(std::string(CUWIRE_PTX_BENCH_DIR) + "/" + name + ".ptx");
  std::unique_ptr<Module> m = Module::parse(text, &error);
  if (!m) std::fprintf(stderr, "parse %s: %s\n", name, error.c_str());
  return m;
}

template <class... Args>
std::vector<uint8_t> Pack(const KernelInfo& k, const Args&... args) {
  std::vector<uint8_t> buf(k.param_bytes, 0);
  size_t i = 0;
  ((std::memcpy(buf.data() + k.params[i].offset, &args, sizeof(args)), ++i), ...);
  return buf;
}

void RunLaunches(benchmark::State& state, const Module& m, const char* kernel, Dim3 grid,
                 Dim3 block, const std::vector<uint8_t>& params, BenchMemory& mem) {
  WorkerPool pool(static_cast<unsigned>(state.range(1)));
  LaunchConfig cfg;
  cfg.pool = &pool;
  cfg.grid = grid;
  cfg.block = block;
  cfg.params = params.data();
  cfg.params_size = params.size();
  // Resident blocks as the default sim profile holds them (40 SMs, 16 blocks and 1024 threads
  // each), as gpu-server launches them.
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  cfg.resident_blocks = 40 * std::min<uint64_t>(16, 1024 / threads);
  std::unordered_map<std::string, uint64_t> vars;
  for (const VariableInfo& v : m.variables()) {
    std::vector<uint8_t> bytes(v.size, 0);
    std::copy(v.initializer.begin(), v.initializer.end(), bytes.begin());
    vars[v.name] = mem.Upload(bytes);
  }
  uint64_t total = 0;
  for (auto _ : state) {
    LaunchResult r = m.launch(kernel, cfg, vars, mem);
    if (r.error != LaunchError::kNone) {
      state.SkipWithError(r.message.c_str());
      return;
    }
    total += r.instructions;
  }
  state.counters["thread_insts"] =
      benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate);
}

// Each benchmark on one thread and on every core.
void Threads(benchmark::internal::Benchmark* b, int64_t size) {
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  b->Args({size, 1});
  if (cores > 1) b->Args({size, cores});
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// One kernel launch: its packed parameters and geometry.
struct Launch {
  std::vector<uint8_t> params;
  Dim3 grid;
  Dim3 block;
};

// Times `kernel` of module `module` on n = range(0) elements: `setup(kernel info, n, mem)`
// uploads the inputs and returns the launch.
template <typename Setup>
void RunKernel(benchmark::State& state, const char* module, const char* kernel, Setup&& setup) {
  std::unique_ptr<Module> m = Load(module);
  if (!m) return state.SkipWithError("no module");
  BenchMemory mem;
  const Launch l = setup(*m->find_kernel(kernel), static_cast<int>(state.range(0)), mem);
  RunLaunches(state, *m, kernel, l.grid, l.block, l.params, mem);
}

// n / 256 blocks of 256 threads.
Dim3 Blocks256(int n) { return {static_cast<uint32_t>(n / 256), 1, 1}; }

void BM_Saxpy(benchmark::State& state) {
  RunKernel(state, "arith", "saxpy", [](const KernelInfo& k, int n, BenchMemory& mem) {
    std::vector<float> x(n, 1.5f), y(n, 2.0f);
    uint64_t dx = mem.Upload(x), dy = mem.Upload(y);
    return Launch{Pack(k, n, 0.5f, dx, dy), Blocks256(n), {256, 1, 1}};
  });
}
BENCHMARK(BM_Saxpy)->Apply([](auto* b) { Threads(b, 1 << 16); });

void BM_Matmul(benchmark::State& state) {
  RunKernel(state, "memory", "matmul", [](const KernelInfo& k, int n, BenchMemory& mem) {
    std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f);
    uint64_t da = mem.Upload(a), db = mem.Upload(b), dc = mem.Alloc(n * n * 4);
    uint32_t g = static_cast<uint32_t>(n / 16);
    return Launch{Pack(k, da, db, dc, n), {g, g, 1}, {16, 16, 1}};
  });
}
BENCHMARK(BM_Matmul)->Apply([](auto* b) { Threads(b, 128); });

void BM_BlockReduce(benchmark::State& state) {
  RunKernel(state, "memory", "block_reduce", [](const KernelInfo& k, int n, BenchMemory& mem) {
    std::vector<int> in(n, 3);
    uint64_t din = mem.Upload(in), dout = mem.Alloc(n / 256 * 4);
    return Launch{Pack(k, din, dout, n), Blocks256(n), {256, 1, 1}};
  });
}
BENCHMARK(BM_BlockReduce)->Apply([](auto* b) { Threads(b, 1 << 16); });

void BM_MathF32(benchmark::State& state) {
  RunKernel(state, "arith", "math_f32", [](const KernelInfo& k, int n, BenchMemory& mem) {
    std::vector<float> x(n, 1.25f);
    uint64_t dx = mem.Upload(x), dout = mem.Alloc(n * 8 * 4);
    return Launch{Pack(k, dx, dout, n), Blocks256(n), {256, 1, 1}};
  });
}
BENCHMARK(BM_MathF32)->Apply([](auto* b) { Threads(b, 1 << 14); });

}  // namespace
}  // namespace cuwire::ptx

BENCHMARK_MAIN();
