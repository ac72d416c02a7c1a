// Runs nvcc-compiled kernels (tests/ptx/kernels/*.cu) through the PTX interpreter and compares
// with CPU references.

#include <cmath>
#include <cstdint>
#include <numeric>

#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

TEST(PtxKernels, VectorAdd) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 1000;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = i * 0.5f;
    b[i] = 100.0f - i;
  }
  uint64_t da = mem.Upload(a), db = mem.Upload(b), dc = mem.Alloc(n * sizeof(float));
  LaunchResult r = Launch(m, mem, "vector_add", {4, 1, 1}, {256, 1, 1}, 0, da, db, dc, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_GT(r.instructions, uint64_t{n} * 5);
  std::vector<float> c = mem.Download<float>(dc, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
}

TEST(PtxKernels, SaxpyF32) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 5000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = std::sin(i * 0.1f);
    y[i] = i * 0.01f;
  }
  uint64_t dx = mem.Upload(x), dy = mem.Upload(y);
  // Grid-stride loop: fewer threads than elements.
  LaunchResult r = Launch(m, mem, "saxpy", {3, 1, 1}, {128, 1, 1}, 0, n, 2.5f, dx, dy);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<float> out = mem.Download<float>(dy, n);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], std::fma(2.5f, x[i], y[i])) << i;
}

TEST(PtxKernels, SaxpyF64) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 777;
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = i * 1.25;
    y[i] = 3.0 - i;
  }
  uint64_t dx = mem.Upload(x), dy = mem.Upload(y);
  LaunchResult r = Launch(m, mem, "daxpy", {7, 1, 1}, {128, 1, 1}, 0, n, -0.75, dx, dy);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<double> out = mem.Download<double>(dy, n);
  for (int i = 0; i < n; ++i) ASSERT_DOUBLE_EQ(out[i], std::fma(-0.75, x[i], y[i])) << i;
}

struct Params {
  int count;
  double scale;
  float offsets[3];
  char tag;
};

TEST(PtxKernels, StructByValue) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const KernelInfo* k = m.module->find_kernel("struct_by_value");
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(k->params.size(), 2u);
  EXPECT_EQ(k->params[0].offset, 0u);
  EXPECT_EQ(k->params[0].size, sizeof(Params));
  EXPECT_EQ(k->params[0].align, 8u);
  EXPECT_EQ(k->params[1].offset, sizeof(Params));
  EXPECT_EQ(k->param_bytes, sizeof(Params) + 8);
  Params p{20, 0.5, {1.0f, 2.0f, 3.0f}, 4};
  uint64_t out = mem.Alloc(32 * sizeof(float));
  LaunchResult r = Launch(m, mem, "struct_by_value", {1, 1, 1}, {32, 1, 1}, 0, p, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<float> o = mem.Download<float>(out, 32);
  for (int i = 0; i < 20; ++i)
    EXPECT_FLOAT_EQ(o[i], static_cast<float>(0.5 * i) + p.offsets[i % 3] + 4) << i;
  for (int i = 20; i < 32; ++i) EXPECT_EQ(o[i], 0.0f);
}

TEST(PtxKernels, IntegerDivision) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 64;
  std::vector<int> a(n), b(n);
  std::vector<unsigned> ua(n), ub(n);
  std::vector<long long> la(n), lb(n);
  std::vector<unsigned long long> ula(n), ulb(n);
  for (int i = 0; i < n; ++i) {
    a[i] = (i * 7919 - 200000) * (i % 2 ? 1 : -1);
    b[i] = (i % 5) - 2 == 0 ? 3 : (i % 5) - 2 + (i % 3) * 11;
    ua[i] = 0xfffffff0u - i * 123457u;
    ub[i] = 1 + i * 3;
    la[i] = (static_cast<long long>(i) * 0x123456789LL - 0x7000000000LL) * (i % 3 ? 1 : -1);
    lb[i] = (i % 7) - 3 == 0 ? 5 : (i % 7) - 3 + (i % 2) * 1000003;
    ula[i] = 0xfedcba9876543210ull - i * 0x1111111111ull;
    ulb[i] = i % 4 == 0 ? 7 : 0x100000000ull + i;  // both the 32- and 64-bit paths
  }
  uint64_t da = mem.Upload(a), db = mem.Upload(b), dq = mem.Alloc(n * 4), dr = mem.Alloc(n * 4);
  uint64_t dua = mem.Upload(ua), dub = mem.Upload(ub), duq = mem.Alloc(n * 4),
           dur = mem.Alloc(n * 4);
  uint64_t dla = mem.Upload(la), dlb = mem.Upload(lb), dlq = mem.Alloc(n * 8),
           dlr = mem.Alloc(n * 8);
  uint64_t dula = mem.Upload(ula), dulb = mem.Upload(ulb), dulq = mem.Alloc(n * 8),
           dulr = mem.Alloc(n * 8);
  LaunchResult r = Launch(m, mem, "int_divmod", {2, 1, 1}, {32, 1, 1}, 0, da, db, dq, dr, dua, dub,
                          duq, dur, dla, dlb, dlq, dlr, dula, dulb, dulq, dulr, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto q = mem.Download<int>(dq, n), rr = mem.Download<int>(dr, n);
  auto uq = mem.Download<unsigned>(duq, n), ur = mem.Download<unsigned>(dur, n);
  auto lq = mem.Download<long long>(dlq, n), lr = mem.Download<long long>(dlr, n);
  auto ulq = mem.Download<unsigned long long>(dulq, n),
       ulr = mem.Download<unsigned long long>(dulr, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(q[i], a[i] / b[i]) << i;
    EXPECT_EQ(rr[i], a[i] % b[i]) << i;
    EXPECT_EQ(uq[i], ua[i] / ub[i]) << i;
    EXPECT_EQ(ur[i], ua[i] % ub[i]) << i;
    EXPECT_EQ(lq[i], la[i] / lb[i]) << i;
    EXPECT_EQ(lr[i], la[i] % lb[i]) << i;
    EXPECT_EQ(ulq[i], ula[i] / ulb[i]) << i;
    EXPECT_EQ(ulr[i], ula[i] % ulb[i]) << i;
  }
}

float PolyRef(float x, int k) {
  float acc = 0.0f;
  for (int j = 0; j <= k; ++j) acc = std::fma(acc, x, static_cast<float>(j + 1));
  return acc;
}
int CollatzRef(int v) {
  int steps = 0;
  while (v != 1 && steps < 1000) {
    v = (v & 1) ? 3 * v + 1 : v / 2;
    ++steps;
  }
  return steps;
}

TEST(PtxKernels, DeviceFunctionCall) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 100;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.1f * i - 3.0f;
  uint64_t dx = mem.Upload(x), dy = mem.Alloc(n * 4), ds = mem.Alloc(n * 4);
  LaunchResult r = Launch(m, mem, "device_call", {2, 1, 1}, {64, 1, 1}, 0, dx, dy, ds, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto y = mem.Download<float>(dy, n);
  auto s = mem.Download<int>(ds, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(y[i], PolyRef(x[i], i % 4), 1e-4f * std::max(1.0f, std::fabs(y[i]))) << i;
    EXPECT_EQ(s[i], (i & 1) ? CollatzRef(i + 1) : -1) << i;
  }
}

TEST(PtxKernels, HalfConversions) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  std::vector<float> in = {0.0f,  1.0f,   -2.5f,    0.1f,    65504.0f, 70000.0f,
                           1e-5f, -1e-7f, 3.14159f, 1000.7f, -0.0f,    6.1e-5f};
  const int n = static_cast<int>(in.size());
  // Expected half bits, as the GPU rounds (nearest even).
  std::vector<uint16_t> expect = {0x0000, 0x3c00, 0xc100, 0x2e66, 0x7bff, 0x7c00,
                                  0x00a8, 0x8002, 0x4248, 0x63d1, 0x8000, 0x03ff};
  uint64_t din = mem.Upload(in), dout = mem.Alloc(n * 4), dh = mem.Alloc(n * 2);
  LaunchResult r = Launch(m, mem, "half_convert", {1, 1, 1}, {32, 1, 1}, 0, din, dout, dh, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto h = mem.Download<uint16_t>(dh, n);
  auto out = mem.Download<float>(dout, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(h[i], expect[i]) << i << " " << in[i];
    if (i != 5) {
      EXPECT_NEAR(out[i], 2 * in[i], std::fabs(in[i]) * 2e-3f + 1e-7f) << i;
    }
  }
  EXPECT_TRUE(std::isinf(out[5]));
}

TEST(PtxKernels, MathF32) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 50;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.37f + i * 0.91f;
  uint64_t dx = mem.Upload(x), dout = mem.Alloc(n * 8 * 4);
  LaunchResult r = Launch(m, mem, "math_f32", {1, 1, 1}, {64, 1, 1}, 0, dx, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto o = mem.Download<float>(dout, n * 8);
  for (int i = 0; i < n; ++i) {
    float v = x[i];
    EXPECT_NEAR(o[i * 8 + 0], std::sqrt(v), 1e-6f * std::sqrt(v)) << i;
    EXPECT_NEAR(o[i * 8 + 1], std::exp(v * 0.1f), 2e-6f * std::exp(v * 0.1f)) << i;
    EXPECT_NEAR(o[i * 8 + 2], std::log(v), 2e-6f * std::max(1.0f, std::fabs(std::log(v)))) << i;
    EXPECT_NEAR(o[i * 8 + 3], std::sin(v), 2e-6f) << i;
    EXPECT_NEAR(o[i * 8 + 4], std::cos(v), 2e-6f) << i;
    EXPECT_NEAR(o[i * 8 + 5], v / 3.0f, 1e-5f * v) << i;
    EXPECT_NEAR(o[i * 8 + 6], 1.0f / std::sqrt(v), 1e-5f / std::sqrt(v)) << i;
    float rest =
        std::tanh(v * 0.1f) + std::fmin(v, 2.0f) + std::fmax(v, 3.0f) + v + std::floor(v * 0.3f);
    EXPECT_NEAR(o[i * 8 + 7], rest, 1e-5f * std::fabs(rest)) << i;
  }
}

TEST(PtxKernels, MathF64) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 40;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.5 + i * 1.7;
  uint64_t dx = mem.Upload(x), dout = mem.Alloc(n * 4 * 8);
  LaunchResult r = Launch(m, mem, "math_f64", {1, 1, 1}, {64, 1, 1}, 0, dx, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto o = mem.Download<double>(dout, n * 4);
  for (int i = 0; i < n; ++i) {
    double v = x[i];
    EXPECT_DOUBLE_EQ(o[i * 4 + 0], std::sqrt(v)) << i;
    EXPECT_NEAR(o[i * 4 + 1], std::exp(v * 0.1), 1e-14 * std::exp(v * 0.1)) << i;
    EXPECT_NEAR(o[i * 4 + 2], 1.0 / v, 1e-15) << i;
    double ref = static_cast<double>(static_cast<long long>(v * 1000.5)) +
                 static_cast<double>(static_cast<unsigned>(static_cast<float>(v) * 3.0f));
    EXPECT_DOUBLE_EQ(o[i * 4 + 3], ref) << i;
  }
}

unsigned BrevRef(unsigned v) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}
unsigned BytePermRef(unsigned x, unsigned y, unsigned s) {
  uint64_t t = (static_cast<uint64_t>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<unsigned>((t >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}

TEST(PtxKernels, BitOperations) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("arith", mem);
  ASSERT_TRUE(m.module);
  const int n = 33;
  std::vector<unsigned> x(n);
  for (int i = 0; i < n; ++i) x[i] = i == 0 ? 0 : (0x9e3779b9u * i) >> (i % 9);
  uint64_t dx = mem.Upload(x), dout = mem.Alloc(n * 8 * 4);
  LaunchResult r = Launch(m, mem, "bits", {1, 1, 1}, {64, 1, 1}, 0, dx, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto o = mem.Download<unsigned>(dout, n * 8);
  for (int i = 0; i < n; ++i) {
    unsigned v = x[i];
    EXPECT_EQ(o[i * 8 + 0], static_cast<unsigned>(__builtin_popcount(v))) << i;
    EXPECT_EQ(o[i * 8 + 1], v == 0 ? 32u : static_cast<unsigned>(__builtin_clz(v))) << i;
    EXPECT_EQ(o[i * 8 + 2], BrevRef(v)) << i;
    EXPECT_EQ(o[i * 8 + 3], BytePermRef(v, 0x12345678u, 0x5140)) << i;
    EXPECT_EQ(o[i * 8 + 4], (v >> 5) & 0x3ff) << i;
    EXPECT_EQ(o[i * 8 + 5], static_cast<unsigned>(static_cast<int>(v) >> 7)) << i;
    int s24 = static_cast<int>(v << 8) >> 8;
    unsigned mul24 = static_cast<unsigned>(static_cast<int64_t>(s24) * 77);
    unsigned hi = static_cast<unsigned>((static_cast<uint64_t>(v) * 0x9e3779b9u) >> 32);
    EXPECT_EQ(o[i * 8 + 6], hi ^ mul24) << i;
    EXPECT_EQ(o[i * 8 + 7],
              static_cast<unsigned>((static_cast<uint64_t>(v) * 0x123456789ull) >> 17))
        << i;
  }
}

TEST(PtxKernels, TiledMatmul) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  const int n = 40;  // not a multiple of the tile: exercises the bounds checks
  std::vector<float> a(n * n), b(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 11) - 5.0f;
    b[i] = static_cast<float>((i * 3) % 13) * 0.5f;
  }
  uint64_t da = mem.Upload(a), db = mem.Upload(b), dc = mem.Alloc(n * n * 4);
  const KernelInfo* k = m.module->find_kernel("matmul");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->static_shared_bytes, 2u * 16 * 16 * 4);
  LaunchResult r = Launch(m, mem, "matmul", {3, 3, 1}, {16, 16, 1}, 0, da, db, dc, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto c = mem.Download<float>(dc, n * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      float ref = 0;
      for (int t = 0; t < n; ++t) ref += a[i * n + t] * b[t * n + j];
      ASSERT_NEAR(c[i * n + j], ref, 1e-3f) << i << "," << j;
    }
}

TEST(PtxKernels, BlockReduce) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  const int n = 1000, block = 256, grid = (n + block - 1) / block;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i * 3 - 700;
  uint64_t din = mem.Upload(in), dout = mem.Alloc(grid * 4);
  LaunchResult r = Launch(m, mem, "block_reduce", {grid, 1, 1}, {block, 1, 1}, 0, din, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto out = mem.Download<int>(dout, grid);
  for (int b = 0; b < grid; ++b) {
    int ref = 0;
    for (int i = b * block; i < std::min(n, (b + 1) * block); ++i) ref += in[i];
    EXPECT_EQ(out[b], ref) << b;
  }
}

TEST(PtxKernels, Histogram) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  const int n = 10000;
  std::vector<unsigned char> data(n);
  for (int i = 0; i < n; ++i) data[i] = static_cast<unsigned char>((i * 37 + i / 7) & 0xff);
  std::vector<unsigned> ref(16, 0);
  for (unsigned char c : data) ref[c % 16]++;
  uint64_t dd = mem.Upload(data), dbins = mem.Alloc(16 * 4);
  LaunchResult r = Launch(m, mem, "histogram", {5, 1, 1}, {128, 1, 1}, 0, dd, n, dbins);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem.Download<unsigned>(dbins, 16), ref);
}

TEST(PtxKernels, Atomics) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  const int grid = 3, block = 64, threads = grid * block;
  std::vector<int> init(12, 0);
  init[0] = 1 << 30;
  init[4] = -1;
  uint64_t dout = mem.Upload(init);
  uint64_t df = mem.Upload(std::vector<float>{1.0f});
  uint64_t dd = mem.Upload(std::vector<double>{2.0});
  uint64_t du = mem.Upload(std::vector<unsigned long long>{5});
  LaunchResult r = Launch(m, mem, "atomics", {grid, 1, 1}, {block, 1, 1}, 0, dout, df, dd, du);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto o = mem.Download<int>(dout, 12);
  EXPECT_EQ(o[0], 1000 - (threads - 1));
  EXPECT_EQ(o[1], (threads - 1) * 3);
  // Every thread's id went through out[2] exactly once: the final value plus the sum of all
  // values read back equals 0 + sum(t).
  long long sum_t = static_cast<long long>(threads) * (threads - 1) / 2;
  EXPECT_EQ(static_cast<long long>(o[2]) + o[9], sum_t);
  EXPECT_GE(o[3], 1);
  EXPECT_EQ(o[10], 1);  // exactly one CAS winner
  int and_ref = -1, or_ref = 0, xor_ref = 0;
  unsigned inc = 0, dec = 0;
  for (int t = 0; t < threads; ++t) {
    and_ref &= ~(1 << (t % 31));
    or_ref |= 1 << (t % 31);
    xor_ref ^= t;
    inc = inc >= 9u ? 0 : inc + 1;
    dec = (dec == 0 || dec > 5u) ? 5u : dec - 1;
  }
  EXPECT_EQ(o[4], and_ref);
  EXPECT_EQ(o[5], or_ref);
  EXPECT_EQ(o[6], xor_ref);
  EXPECT_EQ(static_cast<unsigned>(o[7]), inc);
  EXPECT_EQ(static_cast<unsigned>(o[8]), dec);
  EXPECT_EQ(o[11], grid * (block - 1));  // shared-memory atomicMax per block
  EXPECT_EQ(mem.Download<float>(df, 1)[0], 1.0f + 0.5f * threads);
  EXPECT_EQ(mem.Download<double>(dd, 1)[0], 2.0 + 0.25 * threads);
  EXPECT_EQ(mem.Download<unsigned long long>(du, 1)[0],
            5 + (static_cast<unsigned long long>(threads) << 33));
}

TEST(PtxKernels, DeviceGlobalsAndConstants) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  std::map<std::string, VariableInfo> vars;
  for (const VariableInfo& v : m.module->variables()) vars[v.name] = v;
  ASSERT_TRUE(vars.count("g_counter"));
  ASSERT_TRUE(vars.count("g_table"));
  ASSERT_TRUE(vars.count("c_coeffs"));
  ASSERT_TRUE(vars.count("c_bias"));
  EXPECT_EQ(vars["g_table"].size, 16u);
  EXPECT_FALSE(vars["g_table"].is_const);
  EXPECT_TRUE(vars["c_coeffs"].is_const);
  EXPECT_EQ(vars["g_table"].initializer.size(), 16u);
  // The host writes __constant__ memory before the launch (cudaMemcpyToSymbol).
  std::vector<float> coeffs = {2.0f, -1.0f, 0.5f, 10.0f};
  std::memcpy(mem.translate(m.vars["c_coeffs"], 16), coeffs.data(), 16);
  uint64_t dout = mem.Alloc(64 * 4);
  LaunchResult r = Launch(m, mem, "globals", {2, 1, 1}, {64, 1, 1}, 0, dout);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  float table[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  auto out = mem.Download<float>(dout, 64);
  for (int t = 0; t < 64; ++t) EXPECT_FLOAT_EQ(out[t], table[t % 4] * coeffs[t % 4] + 7) << t;
  EXPECT_EQ(mem.Download<int>(m.vars["g_counter"], 1)[0], 128);
}

TEST(PtxKernels, DynamicSharedMemory) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  const int block = 96, grid = 2, n = block * grid;
  std::vector<float> in(n);
  std::iota(in.begin(), in.end(), 1.0f);
  uint64_t din = mem.Upload(in), dout = mem.Alloc(n * 4);
  LaunchResult r =
      Launch(m, mem, "dynamic_shared", {grid, 1, 1}, {block, 1, 1}, block * 4, din, dout);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto out = mem.Download<float>(dout, n);
  for (int b = 0; b < grid; ++b)
    for (int t = 0; t < block; ++t) EXPECT_EQ(out[b * block + t], in[b * block + block - 1 - t]);
  // Without the dynamic allocation the same kernel reads out of bounds.
  r = Launch(m, mem, "dynamic_shared", {1, 1, 1}, {block, 1, 1}, 0, din, dout);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
}

TEST(PtxKernels, LocalArray) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  const int n = 50;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i * 13 - 300;
  uint64_t din = mem.Upload(in), dout = mem.Alloc(64 * 4);
  LaunchResult r = Launch(m, mem, "local_array", {1, 1, 1}, {64, 1, 1}, 0, din, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto out = mem.Download<int>(dout, 64);
  for (int t = 0; t < 64; ++t) {
    int buf[24];
    for (int i = 0; i < 24; ++i) buf[i] = in[(t + i) % n] * (i + 1);
    int k = in[t % n] % 24;
    if (k < 0) k = -k;
    EXPECT_EQ(out[t], buf[k] + buf[(k + 5) % 24]) << t;
  }
}

TEST(PtxKernels, OutOfBoundsStoreIsIllegalAddress) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  uint64_t d = mem.Alloc(16 * 4);
  LaunchResult r = Launch(m, mem, "out_of_bounds", {1, 1, 1}, {1, 1, 1}, 0, d, 15LL);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  r = Launch(m, mem, "out_of_bounds", {1, 1, 1}, {1, 1, 1}, 0, d, 16LL);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(d + 64));
  EXPECT_NE(r.message.find(addr), std::string::npos) << r.message;
  r = Launch(m, mem, "out_of_bounds", {1, 1, 1}, {1, 1, 1}, 0, uint64_t{0}, 0LL);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
}

TEST(PtxKernels, BarrierReductions) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("memory", mem);
  ASSERT_TRUE(m.module);
  uint64_t dout = mem.Alloc(2 * 3 * 4);
  LaunchResult r = Launch(m, mem, "barrier_reduce", {2, 1, 1}, {100, 1, 1}, 0, dout, 1000);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem.Download<int>(dout, 6), (std::vector<int>{50, 1, 1, 50, 1, 1}));
  r = Launch(m, mem, "barrier_reduce", {1, 1, 1}, {6, 1, 1}, 0, dout, 3);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem.Download<int>(dout, 3), (std::vector<int>{3, 0, 0}));
}

TEST(PtxKernels, WarpShuffleReduce) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("warp", mem);
  ASSERT_TRUE(m.module);
  const int n = 256;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 17) - 3.0f;
  uint64_t din = mem.Upload(in), dout = mem.Alloc(n / 32 * 4);
  LaunchResult r = Launch(m, mem, "warp_reduce", {2, 1, 1}, {128, 1, 1}, 0, din, dout);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto out = mem.Download<float>(dout, n / 32);
  for (int w = 0; w < n / 32; ++w) {
    float ref = 0;
    for (int i = 0; i < 32; ++i) ref += in[w * 32 + i];
    EXPECT_EQ(out[w], ref) << w;
  }
}

TEST(PtxKernels, WarpVoteAndShuffle) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("warp", mem);
  ASSERT_TRUE(m.module);
  const int threads = 80;  // the last warp is partial
  const int limit = 40;
  uint64_t dout = mem.Alloc(threads * 7 * 4);
  LaunchResult r = Launch(m, mem, "warp_vote", {1, 1, 1}, {threads, 1, 1}, 0, dout, limit);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  auto o = mem.Download<int>(dout, threads * 7);
  for (int t = 0; t < threads; ++t) {
    int lane = t & 31, warp = t / 32;
    int warp_size = std::min(32, threads - warp * 32);
    unsigned valid = warp_size == 32 ? 0xffffffffu : (1u << warp_size) - 1;
    const int* x = &o[t * 7];
    EXPECT_EQ(static_cast<unsigned>(x[0]), 0xaaaaaaaau & valid) << t;
    bool all = true;
    for (int k = warp * 32; k < warp * 32 + warp_size; ++k) all = all && k < limit;
    EXPECT_EQ(x[1], all ? 1 : 0) << t;
    EXPECT_EQ(x[2], warp == 0 ? 1 : 0) << t;
    EXPECT_EQ(x[3], lane == 0 ? t * 10 : (t - 1) * 10) << t;
    if ((lane ^ 2) < warp_size) {
      EXPECT_EQ(x[4], t ^ 2) << t;
    }
    EXPECT_EQ(x[5], (warp * 32 + 3) * 7) << t;
    EXPECT_EQ(x[6], lane < 10 ? std::min(10, warp_size) : 0) << t;
  }
}

}  // namespace
}  // namespace cuwire::ptx::testing
