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
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx {
namespace {

class BenchMemory : public GlobalMemory {
 public:
  uint64_t Alloc(size_t bytes) {
    uint64_t addr = next_;
    next_ += (bytes + 4095) / 4096 * 4096 + 4096;
    buffers_[addr].assign(bytes, 0);
    return addr;
  }
  template <class T>
  uint64_t Upload(const std::vector<T>& v) {
    uint64_t addr = Alloc(v.size() * sizeof(T));
    std::memcpy(buffers_[addr].data(), v.data(), v.size() * sizeof(T));
    return addr;
  }
  uint8_t* translate(uint64_t addr, uint64_t len) override {
    auto it = buffers_.upper_bound(addr);
    if (it == buffers_.begin()) return nullptr;
    --it;
    uint64_t off = addr - it->first;
    if (off > it->second.size() || len > it->second.size() - off) return nullptr;
    return it->second.data() + off;
  }

 private:
  uint64_t next_ = 0x10000000;
  std::map<uint64_t, std::vector<uint8_t>> buffers_;
};

std::unique_ptr<Module> Load(const char* name) {
  std::ifstream f(std::string(CUWIRE_PTX_BENCH_DIR) + "/" + name + ".ptx");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string error;
  std::unique_ptr<Module> m = Module::parse(ss.str(), &error);
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

void BM_Saxpy(benchmark::State& state) {
  std::unique_ptr<Module> m = Load("arith");
  if (!m) return state.SkipWithError("no module");
  const int n = static_cast<int>(state.range(0));
  BenchMemory mem;
  std::vector<float> x(n, 1.5f), y(n, 2.0f);
  uint64_t dx = mem.Upload(x), dy = mem.Upload(y);
  auto params = Pack(*m->find_kernel("saxpy"), n, 0.5f, dx, dy);
  RunLaunches(state, *m, "saxpy", {static_cast<uint32_t>(n / 256), 1, 1}, {256, 1, 1}, params, mem);
}
BENCHMARK(BM_Saxpy)->Apply([](auto* b) { Threads(b, 1 << 16); });

void BM_Matmul(benchmark::State& state) {
  std::unique_ptr<Module> m = Load("memory");
  if (!m) return state.SkipWithError("no module");
  const int n = static_cast<int>(state.range(0));
  BenchMemory mem;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f);
  uint64_t da = mem.Upload(a), db = mem.Upload(b), dc = mem.Alloc(n * n * 4);
  auto params = Pack(*m->find_kernel("matmul"), da, db, dc, n);
  uint32_t g = static_cast<uint32_t>(n / 16);
  RunLaunches(state, *m, "matmul", {g, g, 1}, {16, 16, 1}, params, mem);
}
BENCHMARK(BM_Matmul)->Apply([](auto* b) { Threads(b, 128); });

void BM_BlockReduce(benchmark::State& state) {
  std::unique_ptr<Module> m = Load("memory");
  if (!m) return state.SkipWithError("no module");
  const int n = static_cast<int>(state.range(0));
  BenchMemory mem;
  std::vector<int> in(n, 3);
  uint64_t din = mem.Upload(in), dout = mem.Alloc(n / 256 * 4);
  auto params = Pack(*m->find_kernel("block_reduce"), din, dout, n);
  RunLaunches(state, *m, "block_reduce", {static_cast<uint32_t>(n / 256), 1, 1}, {256, 1, 1},
              params, mem);
}
BENCHMARK(BM_BlockReduce)->Apply([](auto* b) { Threads(b, 1 << 16); });

void BM_MathF32(benchmark::State& state) {
  std::unique_ptr<Module> m = Load("arith");
  if (!m) return state.SkipWithError("no module");
  const int n = static_cast<int>(state.range(0));
  BenchMemory mem;
  std::vector<float> x(n, 1.25f);
  uint64_t dx = mem.Upload(x), dout = mem.Alloc(n * 8 * 4);
  auto params = Pack(*m->find_kernel("math_f32"), dx, dout, n);
  RunLaunches(state, *m, "math_f32", {static_cast<uint32_t>(n / 256), 1, 1}, {256, 1, 1}, params,
              mem);
}
BENCHMARK(BM_MathF32)->Apply([](auto* b) { Threads(b, 1 << 14); });

}  // namespace
}  // namespace cuwire::ptx

BENCHMARK_MAIN();
