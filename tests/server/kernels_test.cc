// Real kernels through gpu-server: a C++ driver-API client built on the generated stubs
// (cuwire's libcuda.so.1) talks over a Unix socket to an in-process server on the sim backend.
// Modules are loaded both as PTX text and as fatbins compiled by nvcc at build time, and every
// result is compared with a CPU reference.
//
// Environment (scripts/gpu-check.sh runs the packed binary against gpu-server --backend cuda
// on a GPU host):
//   KERNELS_TEST_SERVER=ADDR    use that server instead of starting one in process
//   KERNELS_TEST_RELAY=LIB      talk to a relay (gpu-server --backend cuda over LIB, cuwire's
//                               libcuda.so.1) in front of the server
//   KERNELS_TEST_PTX, KERNELS_TEST_FATBIN, KERNELS_TEST_FOREIGN_CLIENT
//                               the kernels and the second client, where the build's are not

#include <cuda.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "server/session/server.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

#define ASSERT_CU(x)                                                \
  do {                                                              \
    CUresult r_ = (x);                                              \
    const char* n_ = "?";                                           \
    cuGetErrorName(r_, &n_);                                        \
    ASSERT_EQ(r_, CUDA_SUCCESS) << #x << " -> " << (n_ ? n_ : "?"); \
  } while (0)

// A build-time path, unless the environment names another.
const char* path_of(const char* env, const char* built) {
  const char* v = getenv(env);
  return v && *v ? v : built;
}

// One server and one client connection for the whole binary (the library holds one per
// process, as a real app does). With KERNELS_TEST_RELAY naming cuwire's libcuda.so.1, the
// client talks to a relay in front of that server (gpu-server --backend cuda over cuwire's own
// client library, design decision 12): every test then runs through the cuda backend. With
// KERNELS_TEST_SERVER the server is someone else's (a gpu-server on a GPU host).
class ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string lib = env_or_empty("KERNELS_TEST_RELAY");
    Address serving;
    if (const char* external = getenv("KERNELS_TEST_SERVER"); external && *external) {
      ASSERT_TRUE(parse_address(external, &serving)) << "KERNELS_TEST_SERVER=" << external;
      if (!lib.empty()) {
        dir_ = std::make_unique<TempDir>();
        relay_ = std::make_unique<RelayServer>(GPU_SERVER, lib, serving, *dir_);
        ASSERT_TRUE(relay_->ok()) << relay_->log();
        serving = relay_->address();
      }
    } else {
      server_ = std::make_unique<TestServer>(
          TestServerOptions{.gpus = 2, .relay_library = lib, .relay_gpu_server = GPU_SERVER});
      ASSERT_TRUE(server_->ok()) << server_->status().to_string();
      serving = server_->address();
    }
    setenv("CUWIRE_SERVER", serving.to_string().c_str(), 1);
  }
  void TearDown() override {
    relay_.reset();
    server_.reset();
    dir_.reset();
  }

 private:
  std::unique_ptr<TestServer> server_;  // in process, with its relay if asked for
  // Someone else's server, and the relay in front of it if asked for.
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<RelayServer> relay_;
};

enum class ImageKind { kPtx, kFatbin };

class KernelsTest : public ::testing::TestWithParam<ImageKind> {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    CUdevice dev;
    ASSERT_CU(cuDeviceGet(&dev, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx_, dev));
    ASSERT_CU(cuCtxSetCurrent(ctx_));
    image_ =
        read_file(GetParam() == ImageKind::kPtx ? path_of("KERNELS_TEST_PTX", KERNELS_PTX)
                                                : path_of("KERNELS_TEST_FATBIN", KERNELS_FATBIN));
    ASSERT_FALSE(image_.empty());
    ASSERT_CU(cuModuleLoadData(&module_, image_.data()));
  }
  void TearDown() override {
    if (module_) {
      EXPECT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
    }
    for (CUdeviceptr p : allocations_) EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
  }

  CUfunction fn(const char* name) {
    CUfunction f = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&f, module_, name), CUDA_SUCCESS) << name;
    return f;
  }

  template <typename T>
  CUdeviceptr upload(const std::vector<T>& v) {
    CUdeviceptr d = alloc(v.size() * sizeof(T));
    EXPECT_EQ(cuMemcpyHtoD(d, v.data(), v.size() * sizeof(T)), CUDA_SUCCESS);
    return d;
  }
  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr d = 0;
    EXPECT_EQ(cuMemAlloc(&d, bytes), CUDA_SUCCESS);
    EXPECT_EQ(cuMemsetD8(d, 0, bytes), CUDA_SUCCESS);
    allocations_.push_back(d);
    return d;
  }
  template <typename T>
  std::vector<T> download(CUdeviceptr d, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cuMemcpyDtoH(v.data(), d, n * sizeof(T)), CUDA_SUCCESS);
    return v;
  }
  void launch(CUfunction f, unsigned gx, unsigned bx, std::vector<void*> args, unsigned gy = 1,
              unsigned by = 1, unsigned shared = 0, CUstream s = nullptr) {
    ASSERT_CU(cuLaunchKernel(f, gx, gy, 1, bx, by, 1, shared, s, args.data(), nullptr));
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::string image_;
  std::vector<CUdeviceptr> allocations_;
};

TEST_P(KernelsTest, VectorAdd) {
  const int n = 5000;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = i * 0.5f;
    b[i] = 1000.0f - i;
  }
  CUdeviceptr da = upload(a), db = upload(b), dc = alloc(n * sizeof(float));
  int nn = n;
  launch(fn("vector_add"), (n + 127) / 128, 128, {&da, &db, &dc, &nn});
  ASSERT_CU(cuCtxSynchronize());
  auto c = download<float>(dc, n);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(c[i], a[i] + b[i]) << i;
}

TEST_P(KernelsTest, SaxpyF32AndF64) {
  const int n = 3000;
  std::vector<float> x(n), y(n);
  std::vector<double> xd(n), yd(n);
  for (int i = 0; i < n; ++i) {
    x[i] = std::sin(i * 0.1f);
    y[i] = std::cos(i * 0.1f);
    xd[i] = 1.0 / (i + 1);
    yd[i] = i * 0.25;
  }
  CUdeviceptr dx = upload(x), dy = upload(y), dxd = upload(xd), dyd = upload(yd);
  float alpha = 1.5f;
  double alphad = -0.75;
  int nn = n;
  launch(fn("saxpy_f32"), 4, 128, {&alpha, &dx, &dy, &nn});
  launch(fn("saxpy_f64"), (n + 255) / 256, 256, {&alphad, &dxd, &dyd, &nn});
  ASSERT_CU(cuCtxSynchronize());
  auto ry = download<float>(dy, n);
  auto ryd = download<double>(dyd, n);
  for (int i = 0; i < n; ++i) {
    ASSERT_NEAR(ry[i], std::fma(alpha, x[i], y[i]), 1e-6f) << i;
    ASSERT_DOUBLE_EQ(ryd[i], alphad * xd[i] + yd[i]) << i;
  }
}

TEST_P(KernelsTest, TiledMatmul) {
  const int m = 37, n = 29, k = 45;
  std::vector<float> A(m * k), B(k * n), ref(m * n, 0.0f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (auto& v : A) v = dist(rng);
  for (auto& v : B) v = dist(rng);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c)
      for (int i = 0; i < k; ++i) ref[r * n + c] += A[r * k + i] * B[i * n + c];
  CUdeviceptr dA = upload(A), dB = upload(B), dC = alloc(m * n * sizeof(float));
  int mm = m, nn = n, kk = k;
  launch(fn("matmul_tiled"), (n + 15) / 16, 16, {&dA, &dB, &dC, &mm, &nn, &kk}, (m + 15) / 16, 16);
  ASSERT_CU(cuCtxSynchronize());
  auto C = download<float>(dC, m * n);
  for (int i = 0; i < m * n; ++i) ASSERT_NEAR(C[i], ref[i], 1e-4f) << i;
}

TEST_P(KernelsTest, BlockReductionWithDynamicShared) {
  const int n = 10000, block = 256, blocks = (n + block - 1) / block;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 37) % 1001 - 500;
  CUdeviceptr din = upload(in), dout = alloc(blocks * sizeof(long long));
  int nn = n;
  launch(fn("block_sum"), blocks, block, {&din, &dout, &nn}, 1, 1, block * sizeof(long long));
  ASSERT_CU(cuCtxSynchronize());
  auto partial = download<long long>(dout, blocks);
  EXPECT_EQ(std::accumulate(partial.begin(), partial.end(), 0LL),
            std::accumulate(in.begin(), in.end(), 0LL));
}

TEST_P(KernelsTest, WarpShuffleReduction) {
  const int n = 4096;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 17);
  CUdeviceptr din = upload(in), dout = alloc(sizeof(float));
  int nn = n;
  launch(fn("warp_sum"), n / 256, 256, {&din, &dout, &nn});
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_FLOAT_EQ(download<float>(dout, 1)[0], std::accumulate(in.begin(), in.end(), 0.0f));
}

TEST_P(KernelsTest, HistogramWithSharedAndGlobalAtomics) {
  const int n = 20000;
  std::vector<unsigned char> data(n);
  std::vector<unsigned> ref(64, 0);
  for (int i = 0; i < n; ++i) {
    data[i] = static_cast<unsigned char>((i * 131) ^ (i >> 3));
    ref[data[i] & 63]++;
  }
  CUdeviceptr dd = upload(data), bins = alloc(64 * sizeof(unsigned));
  int nn = n;
  launch(fn("histogram64"), 8, 128, {&dd, &bins, &nn});
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(download<unsigned>(bins, 64), ref);
}

struct Affine {
  float scale;
  double offset;
  int pad[3];
  short tag;
};

TEST_P(KernelsTest, StructByValue) {
  const int n = 100;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  CUdeviceptr din = upload(in), dout = alloc(n * sizeof(double));
  Affine p{2.5f, -3.25, {7, 8, 9}, 11};
  int nn = n;
  launch(fn("apply_affine"), 1, 128, {&p, &din, &dout, &nn});
  ASSERT_CU(cuCtxSynchronize());
  auto out = download<double>(dout, n);
  for (int i = 0; i < n; ++i) ASSERT_DOUBLE_EQ(out[i], 2.5f * in[i] - 3.25 + 11) << i;
}

TEST_P(KernelsTest, GlobalsAndConstants) {
  CUdeviceptr coeffs = 0, counter = 0, table = 0;
  size_t size = 0;
  ASSERT_CU(cuModuleGetGlobal(&coeffs, &size, module_, "coeffs"));
  EXPECT_EQ(size, 4 * sizeof(float));
  ASSERT_CU(cuModuleGetGlobal(&counter, &size, module_, "counter"));
  EXPECT_EQ(size, sizeof(int));
  ASSERT_CU(cuModuleGetGlobal(&table, &size, module_, "table"));
  std::vector<float> t(8);
  ASSERT_CU(cuMemcpyDtoH(t.data(), table, sizeof(float) * 8));
  EXPECT_EQ(t, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));  // initialiser applied at load
  const float c[4] = {0.5f, 1.0f, 2.0f, 4.0f};
  ASSERT_CU(cuMemcpyHtoD(coeffs, c, sizeof c));
  int zero = 0;
  ASSERT_CU(cuMemcpyHtoD(counter, &zero, sizeof zero));
  const int n = 200;
  CUdeviceptr dout = alloc(n * sizeof(float));
  int nn = n;
  launch(fn("use_globals"), 2, 128, {&dout, &nn});
  ASSERT_CU(cuCtxSynchronize());
  auto out = download<float>(dout, n);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], c[i & 3] * (1 + (i & 7))) << i;
  int count = 0;
  ASSERT_CU(cuMemcpyDtoH(&count, counter, sizeof count));
  EXPECT_EQ(count, n);
}

TEST_P(KernelsTest, StreamsAndEvents) {
  CUstream a, b;
  ASSERT_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUevent start, done_a, end;
  ASSERT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&done_a, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&end, CU_EVENT_DEFAULT));
  CUdeviceptr flag = alloc(sizeof(int)), out = alloc(sizeof(int));
  int value = 41, spins = 20000;
  ASSERT_CU(cuEventRecord(start, a));
  launch(fn("slow_write"), 1, 1, {&flag, &value, &spins}, 1, 1, 0, a);
  ASSERT_CU(cuEventRecord(done_a, a));
  // b must not read the flag before a wrote it.
  ASSERT_CU(cuStreamWaitEvent(b, done_a, 0));
  launch(fn("copy_plus_one"), 1, 1, {&flag, &out}, 1, 1, 0, b);
  ASSERT_CU(cuEventRecord(end, b));
  ASSERT_CU(cuEventSynchronize(end));
  EXPECT_EQ(cuEventQuery(end), CUDA_SUCCESS);
  int result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, out, sizeof result));
  EXPECT_EQ(result, 42);
  float ms = -1;
  ASSERT_CU(cuEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 0.0f);
  ASSERT_CU(cuStreamSynchronize(a));
  ASSERT_CU(cuStreamDestroy(a));
  ASSERT_CU(cuStreamDestroy(b));
  for (CUevent e : {start, done_a, end}) ASSERT_CU(cuEventDestroy(e));
}

TEST_P(KernelsTest, BadInputGetsDriverErrors) {
  CUfunction f = fn("vector_add");
  CUdeviceptr d = alloc(256);
  int n = 1;
  void* args[] = {&d, &d, &d, &n};
  // Block over the limit, zero grid: the driver's code 9, which cudart reports as
  // cudaErrorInvalidConfiguration (client-lib/calls/launches.cc).
  constexpr auto kInvalidConfiguration = static_cast<CUresult>(9);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr),
            kInvalidConfiguration);
  EXPECT_EQ(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), kInvalidConfiguration);
  // A function handle this session was never given.
  EXPECT_NE(cuLaunchKernel(reinterpret_cast<CUfunction>(0x12345678), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           args, nullptr),
            CUDA_SUCCESS);
  // Copies past an allocation, from freed memory, and a double free.
  std::vector<char> host(512);
  EXPECT_EQ(cuMemcpyHtoD(d + 128, host.data(), 256), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr tmp = 0;
  ASSERT_CU(cuMemAlloc(&tmp, 64));
  ASSERT_CU(cuMemFree(tmp));
  EXPECT_EQ(cuMemcpyDtoH(host.data(), tmp, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(tmp), CUDA_ERROR_INVALID_VALUE);
  // A malformed module image.
  CUmodule bad = nullptr;
  const char junk[] = "this is not ptx";
  EXPECT_NE(cuModuleLoadData(&bad, junk), CUDA_SUCCESS);
  // Unknown function name.
  CUfunction missing = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&missing, module_, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  // Normal work still runs afterwards.
  std::vector<float> a(4, 1.0f);
  CUdeviceptr da = upload(a), dc = alloc(4 * sizeof(float));
  int four = 4;
  launch(f, 1, 32, {&da, &da, &dc, &four});
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(download<float>(dc, 4), (std::vector<float>(4, 2.0f)));
}

TEST_P(KernelsTest, Copy3DPeerBetweenDevices) {
  int devices = 0;
  ASSERT_CU(cuDeviceGetCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs two devices, the server has " << devices;
  // A 3D box from a pitched volume on device 0 to a tighter one on device 1.
  const size_t w = 24, h = 5, d = 3, src_pitch = 64, src_height = 8, dst_pitch = 32;
  std::vector<unsigned char> host(src_pitch * src_height * d);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7 + 1);
  CUdeviceptr src = upload(host);
  CUdevice dev1;
  ASSERT_CU(cuDeviceGet(&dev1, 1));
  CUcontext ctx1 = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx1, dev1));
  ASSERT_CU(cuCtxSetCurrent(ctx1));
  CUdeviceptr dst = 0;
  ASSERT_CU(cuMemAlloc(&dst, dst_pitch * h * d));
  ASSERT_CU(cuMemsetD8(dst, 0, dst_pitch * h * d));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  CUDA_MEMCPY3D_PEER p{};
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = src;
  p.srcContext = ctx_;
  p.srcPitch = src_pitch;
  p.srcHeight = src_height;
  p.srcXInBytes = 4;
  p.srcY = 1;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = dst;
  p.dstContext = ctx1;
  p.dstPitch = dst_pitch;
  p.dstHeight = h;
  p.WidthInBytes = w;
  p.Height = h;
  p.Depth = d;
  ASSERT_CU(cuMemcpy3DPeer(&p));
  std::vector<unsigned char> out(dst_pitch * h * d);
  ASSERT_CU(cuMemcpyDtoH(out.data(), dst, out.size()));
  for (size_t z = 0; z < d; ++z)
    for (size_t y = 0; y < h; ++y)
      for (size_t x = 0; x < w; ++x) {
        ASSERT_EQ(out[(z * h + y) * dst_pitch + x],
                  host[(z * src_height + y + 1) * src_pitch + x + 4])
            << x << "," << y << "," << z;
      }
  // A context this process was never given is refused.
  p.dstContext = reinterpret_cast<CUcontext>(0x1234);
  EXPECT_EQ(cuMemcpy3DPeer(&p), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuMemFree(dst));
}

TEST_P(KernelsTest, ArraysCopiesAndBadInput) {
  size_t free0 = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free0, &total));
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 32;
  d.Height = 8;
  d.Depth = 3;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 2;
  CUarray a = nullptr, b = nullptr;
  ASSERT_CU(cuArray3DCreate(&a, &d));
  ASSERT_CU(cuArray3DCreate(&b, &d));
  size_t free1 = 0;
  ASSERT_CU(cuMemGetInfo(&free1, &total));
  EXPECT_GE(free0 - free1, 2 * 32 * 8 * 3 * 8u);
  CUDA_ARRAY3D_DESCRIPTOR got{};
  ASSERT_CU(cuArray3DGetDescriptor(&got, a));
  EXPECT_EQ(got.Width, 32u);
  EXPECT_EQ(got.Height, 8u);
  EXPECT_EQ(got.Depth, 3u);
  EXPECT_EQ(got.Format, CU_AD_FORMAT_FLOAT);
  EXPECT_EQ(got.NumChannels, 2u);

  // 1D copies: host -> array, array -> array, array -> device, device -> array -> host.
  const size_t bytes = 32 * 8 * 3 * 8;
  std::vector<unsigned char> in(bytes);
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  ASSERT_CU(cuMemcpyHtoA(a, 0, in.data(), bytes));
  ASSERT_CU(cuMemcpyAtoA(b, 0, a, 0, bytes));
  CUdeviceptr dev = alloc(bytes);
  ASSERT_CU(cuMemcpyAtoD(dev, b, 0, bytes));
  EXPECT_EQ(download<unsigned char>(dev, bytes), in);
  ASSERT_CU(cuMemsetD8(dev, 0x5a, 100));
  ASSERT_CU(cuMemcpyDtoA(a, 50, dev, 100));
  std::vector<unsigned char> out(bytes);
  ASSERT_CU(cuMemcpyAtoH(out.data(), a, 0, bytes));
  for (size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(out[i], i >= 50 && i < 150 ? 0x5a : in[i]) << i;
  }
  // Async 1D copies on a stream.
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, 0));
  ASSERT_CU(cuMemcpyHtoAAsync(b, 8, in.data(), 64, s));
  std::vector<unsigned char> part(72);
  ASSERT_CU(cuMemcpyAtoHAsync(part.data(), b, 0, 72, s));
  ASSERT_CU(cuStreamSynchronize(s));
  for (size_t i = 0; i < 72; ++i) ASSERT_EQ(part[i], i < 8 ? in[i] : in[i - 8]) << i;
  ASSERT_CU(cuStreamDestroy(s));

  // A 3D copy of one plane (z = 1) out of the array into pitched host rows.
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = b;
  c.srcZ = 1;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  std::vector<unsigned char> plane(300 * 8, 0);
  c.dstHost = plane.data();
  c.dstPitch = 300;
  c.dstHeight = 8;
  c.WidthInBytes = 256;
  c.Height = 8;
  c.Depth = 1;
  ASSERT_CU(cuMemcpy3D(&c));
  for (size_t y = 0; y < 8; ++y) {
    for (size_t x = 0; x < 300; ++x) {
      unsigned char want = x < 256 ? in[256 * 8 + y * 256 + x] : 0;
      ASSERT_EQ(plane[y * 300 + x], want) << x << "," << y;
    }
  }

  // Regions outside the array, and bad descriptors.
  EXPECT_EQ(cuMemcpyHtoA(a, bytes - 10, in.data(), 11), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAtoH(out.data(), a, 1, bytes), CUDA_ERROR_INVALID_VALUE);
  c.srcZ = 3;
  EXPECT_EQ(cuMemcpy3D(&c), CUDA_ERROR_INVALID_VALUE);
  c.srcZ = 0;
  c.srcXInBytes = 8;
  EXPECT_EQ(cuMemcpy3D(&c), CUDA_ERROR_INVALID_VALUE);
  CUarray bad = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR e = d;
  e.NumChannels = 3;
  EXPECT_EQ(cuArray3DCreate(&bad, &e), CUDA_ERROR_INVALID_VALUE);
  e = d;
  e.Width = 0;
  EXPECT_EQ(cuArray3DCreate(&bad, &e), CUDA_ERROR_INVALID_VALUE);
  e = d;
  e.Flags = CUDA_ARRAY3D_CUBEMAP;  // cube maps are square with six faces
  EXPECT_EQ(cuArray3DCreate(&bad, &e), CUDA_ERROR_INVALID_VALUE);
  e.Width = e.Height = 16;
  e.Depth = 6;
  ASSERT_CU(cuArray3DCreate(&bad, &e));
  ASSERT_CU(cuArrayDestroy(bad));
  e = d;
  e.Width = 1u << 20;  // beyond the 3D texture width limit
  EXPECT_EQ(cuArray3DCreate(&bad, &e), CUDA_ERROR_INVALID_VALUE);

  // A destroyed array is gone, descriptor included (the client's cached one too).
  ASSERT_CU(cuArrayDestroy(a));
  EXPECT_EQ(cuArray3DGetDescriptor(&got, a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemcpyAtoH(out.data(), a, 0, 16), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuArrayDestroy(b));
  ASSERT_CU(cuMemFree(dev));
  allocations_.clear();
  size_t free2 = 0;
  ASSERT_CU(cuMemGetInfo(&free2, &total));
  EXPECT_EQ(free2, free0) << "the arrays' memory was not given back";
}

TEST_P(KernelsTest, TextureAndSurfaceObjectsRefuseBadInput) {
  const CUDA_ARRAY_DESCRIPTOR d = array_descriptor(16, 16, CU_AD_FORMAT_FLOAT);
  CUarray a = nullptr;
  ASSERT_CU(cuArrayCreate(&a, &d));
  CUDA_RESOURCE_DESC r{};
  r.resType = CU_RESOURCE_TYPE_ARRAY;
  r.res.array.hArray = a;
  CUDA_TEXTURE_DESC t{};
  t.filterMode = CU_TR_FILTER_MODE_LINEAR;
  CUtexObject tex = 0;
  ASSERT_CU(cuTexObjectCreate(&tex, &r, &t, nullptr));
  CUDA_RESOURCE_DESC back{};
  ASSERT_CU(cuTexObjectGetResourceDesc(&back, tex));
  EXPECT_EQ(back.resType, CU_RESOURCE_TYPE_ARRAY);
  EXPECT_EQ(back.res.array.hArray, a);
  // Not made for load/store: no surface.
  CUsurfObject surf = 0;
  EXPECT_EQ(cuSurfObjectCreate(&surf, &r), CUDA_ERROR_INVALID_VALUE);
  // Linear memory that is not this session's, or runs past its allocation.
  CUdeviceptr mem = alloc(1024);
  CUDA_RESOURCE_DESC lin{};
  lin.resType = CU_RESOURCE_TYPE_LINEAR;
  lin.res.linear.devPtr = mem;
  lin.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT32;
  lin.res.linear.numChannels = 1;
  lin.res.linear.sizeInBytes = 2048;
  CUDA_TEXTURE_DESC pt{};
  CUtexObject bad = 0;
  EXPECT_EQ(cuTexObjectCreate(&bad, &lin, &pt, nullptr), CUDA_ERROR_INVALID_VALUE);
  lin.res.linear.devPtr = 0x7000;
  lin.res.linear.sizeInBytes = 64;
  EXPECT_EQ(cuTexObjectCreate(&bad, &lin, &pt, nullptr), CUDA_ERROR_INVALID_VALUE);
  lin.res.linear.devPtr = mem;
  CUtexObject ok = 0;
  ASSERT_CU(cuTexObjectCreate(&ok, &lin, &pt, nullptr));
  // Linear memory is fetched, never filtered.
  EXPECT_EQ(cuTexObjectCreate(&bad, &lin, &t, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Objects this session does not hold, and objects already destroyed.
  EXPECT_EQ(cuTexObjectDestroy(tex + ok + 1000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuSurfObjectDestroy(tex), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuTexObjectDestroy(ok));
  EXPECT_EQ(cuTexObjectDestroy(ok), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuTexObjectGetResourceDesc(&back, ok), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuTexObjectDestroy(tex));
  // A destroyed array names nothing.
  ASSERT_CU(cuArrayDestroy(a));
  EXPECT_EQ(cuTexObjectCreate(&bad, &r, &t, nullptr), CUDA_ERROR_INVALID_HANDLE);
}

// A second client process, in its own session.
class ForeignClient : public ChildProcess {
 public:
  ForeignClient() : ChildProcess(path_of("KERNELS_TEST_FOREIGN_CLIENT", FOREIGN_CLIENT), {}) {}
  // Its device pointer, stream, event, context and array handles.
  bool read_handles(unsigned long long h[5]) {
    return std::sscanf(line().c_str(), "%llx %llx %llx %llx %llx", &h[0], &h[1], &h[2], &h[3],
                       &h[4]) == 5;
  }
  // Lets it check its session; true when it found everything intact.
  bool finish() {
    send("go\n");
    return wait() == 0;
  }
};

TEST_P(KernelsTest, AnotherSessionsHandlesAndPointersAreRefused) {
  size_t free_before = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  ForeignClient other;
  ASSERT_TRUE(other.started());
  unsigned long long h[5];
  ASSERT_TRUE(other.read_handles(h));
  CUdeviceptr their_ptr = h[0];
  auto their_stream = reinterpret_cast<CUstream>(h[1]);
  auto their_event = reinterpret_cast<CUevent>(h[2]);
  auto their_ctx = reinterpret_cast<CUcontext>(h[3]);
  std::vector<unsigned char> junk(4096, 0xee);
  EXPECT_EQ(cuMemcpyHtoD(their_ptr, junk.data(), junk.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(junk.data(), their_ptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8(their_ptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(their_ptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamSynchronize(their_stream), CUDA_ERROR_INVALID_HANDLE);
  // Their array: no copy in or out, no descriptor, no destroy (this session holds no array, so
  // the id names nothing here).
  auto their_array = reinterpret_cast<CUarray>(h[4]);
  EXPECT_EQ(cuMemcpyHtoA(their_array, 0, junk.data(), 64), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemcpyAtoH(junk.data(), their_array, 0, 64), CUDA_ERROR_INVALID_HANDLE);
  CUDA_MEMCPY2D c2{};
  c2.srcMemoryType = CU_MEMORYTYPE_HOST;
  c2.srcHost = junk.data();
  c2.srcPitch = 256;
  c2.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c2.dstArray = their_array;
  c2.WidthInBytes = 256;
  c2.Height = 4;
  EXPECT_EQ(cuMemcpy2D(&c2), CUDA_ERROR_INVALID_HANDLE);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  EXPECT_EQ(cuArray3DGetDescriptor(&d3, their_array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArrayDestroy(their_array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(their_event, nullptr) == CUDA_SUCCESS ? cuCtxSynchronize()
                                                                : CUDA_ERROR_INVALID_HANDLE,
            CUDA_ERROR_INVALID_HANDLE);
  // Handle ids name objects within one session: the other client's primary context may carry
  // the same id as ours (both are minted the same way), and then it names our own context.
  if (their_ctx != ctx_) {
    EXPECT_EQ(cuCtxSetCurrent(their_ctx) == CUDA_SUCCESS ? cuCtxSynchronize()
                                                         : CUDA_ERROR_INVALID_CONTEXT,
              CUDA_ERROR_INVALID_CONTEXT);
  }
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  // A kernel that faults, in a context of its own: the error is sticky there, and neither this
  // session's other context nor the other client notice.
  CUcontext scratch = nullptr;
  CUdevice dev;
  ASSERT_CU(cuDeviceGet(&dev, 0));
  ASSERT_CU(cuCtxCreate(&scratch, nullptr, 0, dev));
  CUmodule m = nullptr;
  ASSERT_CU(cuModuleLoadData(&m, image_.data()));
  CUfunction wf = nullptr;
  ASSERT_CU(cuModuleGetFunction(&wf, m, "write_to"));
  CUdeviceptr bad = 0x10;
  void* args[] = {&bad};
  ASSERT_CU(cuLaunchKernel(wf, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_CU(cuCtxDestroy(scratch));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  EXPECT_TRUE(other.finish()) << "the other client's session was disturbed";
  // It left memory, an array, texture and surface objects and a graph behind: its session's
  // end gives them back. The server reclaims on its own thread once it sees the disconnect.
  size_t free_after = 0;
  for (int i = 0; i < 500; ++i) {
    ASSERT_CU(cuMemGetInfo(&free_after, &total));
    if (free_after == free_before) break;
    usleep(10000);
  }
  EXPECT_EQ(free_after, free_before) << "the other client's memory was not reclaimed";
  // This session's primary context still works.
  std::vector<float> a(8, 3.0f);
  CUdeviceptr da = upload(a), dc = alloc(8 * sizeof(float));
  int eight = 8;
  launch(fn("vector_add"), 1, 32, {&da, &da, &dc, &eight});
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(download<float>(dc, 8), (std::vector<float>(8, 6.0f)));
}

INSTANTIATE_TEST_SUITE_P(Images, KernelsTest,
                         ::testing::Values(ImageKind::kPtx, ImageKind::kFatbin),
                         [](const auto& info) {
                           return info.param == ImageKind::kPtx ? std::string("ptx")
                                                                : std::string("fatbin");
                         });

}  // namespace
}  // namespace cuwire::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new cuwire::testing::ServerEnvironment);
  return RUN_ALL_TESTS();
}
