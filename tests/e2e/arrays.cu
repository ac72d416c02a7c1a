// CUDA arrays: 1D, 2D, 3D and layered arrays, copies between arrays, host and device memory
// (2D and 3D, sync and async, array to array), descriptors, bad regions, and the batch copies.
#include <string.h>

#include <vector>

#include "tests/e2e/check.h"

static void two_d() {
  const int w = 37, h = 19;  // float2 elements
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float2>();
  cudaArray_t a, b;
  CHECK(cudaMallocArray(&a, &fd, w, h));
  CHECK(cudaMallocArray(&b, &fd, w, h, cudaArraySurfaceLoadStore));
  cudaChannelFormatDesc got;
  cudaExtent ext;
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, b));
  EXPECT(got.x == 32 && got.y == 32 && got.z == 0 && got.f == cudaChannelFormatKindFloat,
         "format %d %d %d %d", got.x, got.y, got.z, (int)got.f);
  EXPECT(ext.width == (size_t)w && ext.height == (size_t)h && ext.depth == 0, "extent %zu %zu %zu",
         ext.width, ext.height, ext.depth);
  EXPECT(flags & cudaArraySurfaceLoadStore, "flags %u", flags);

  // Host rows with padding, into the array; array to array; back out through device memory.
  const size_t hp = w * sizeof(float2) + 24;
  std::vector<unsigned char> host(hp * h, 0xAB);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float2 v = make_float2(x + 0.5f, y * 100.0f);
      memcpy(&host[y * hp + x * sizeof(float2)], &v, sizeof v);
    }
  CHECK(
      cudaMemcpy2DToArray(a, 0, 0, host.data(), hp, w * sizeof(float2), h, cudaMemcpyHostToDevice));
  CHECK(
      cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, w * sizeof(float2), h, cudaMemcpyDeviceToDevice));
  float2* d;
  size_t dp;
  CHECK(cudaMallocPitch((void**)&d, &dp, w * sizeof(float2), h));
  CHECK(cudaMemcpy2DFromArray(d, dp, b, 0, 0, w * sizeof(float2), h, cudaMemcpyDeviceToDevice));
  std::vector<float2> out(w * h);
  CHECK(cudaMemcpy2D(out.data(), w * sizeof(float2), d, dp, w * sizeof(float2), h,
                     cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      EXPECT(out[y * w + x].x == x + 0.5f && out[y * w + x].y == y * 100.0f, "at %d,%d", x, y);

  // A sub-rectangle, asynchronously, at an offset (x in bytes).
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::vector<float2> patch(4 * 3, make_float2(-1, -2));
  CHECK(cudaMemcpy2DToArrayAsync(a, 5 * sizeof(float2), 7, patch.data(), 4 * sizeof(float2),
                                 4 * sizeof(float2), 3, cudaMemcpyHostToDevice, s));
  std::vector<float2> back(w * h);
  CHECK(cudaMemcpy2DFromArrayAsync(back.data(), w * sizeof(float2), a, 0, 0, w * sizeof(float2), h,
                                   cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      bool in = x >= 5 && x < 9 && y >= 7 && y < 10;
      float2 want = in ? make_float2(-1, -2) : make_float2(x + 0.5f, y * 100.0f);
      EXPECT(back[y * w + x].x == want.x && back[y * w + x].y == want.y, "patch at %d,%d", x, y);
    }

  // Regions outside the array are refused and change nothing.
  cudaError_t e = cudaMemcpy2DToArray(a, (w - 1) * sizeof(float2), 0, host.data(), hp,
                                      2 * sizeof(float2), 1, cudaMemcpyHostToDevice);
  EXPECT(e == cudaErrorInvalidValue, "copy past the row: %s", cudaGetErrorName(e));
  e = cudaMemcpy2DFromArray(out.data(), w * sizeof(float2), a, 0, 1, w * sizeof(float2), h,
                            cudaMemcpyDeviceToHost);
  EXPECT(e == cudaErrorInvalidValue, "copy past the last row: %s", cudaGetErrorName(e));
  cudaGetLastError();

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
}

static void one_d() {
  const int n = 1000;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<int>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &fd, n));
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i * 3 - 7;
  CHECK(cudaMemcpy2DToArray(a, 0, 0, v.data(), n * sizeof(int), n * sizeof(int), 1,
                            cudaMemcpyHostToDevice));
  std::vector<int> out(n - 10);
  CHECK(cudaMemcpy2DFromArray(out.data(), out.size() * sizeof(int), a, 10 * sizeof(int), 0,
                              out.size() * sizeof(int), 1, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n - 10; ++i) EXPECT(out[i] == v[i + 10], "1D at %d", i);
  CHECK(cudaFreeArray(a));
}

static void three_d(bool layered) {
  const int w = 9, h = 5, depth = 4;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<unsigned short>();
  cudaArray_t a;
  CHECK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(w, h, depth), layered ? cudaArrayLayered : 0));
  cudaChannelFormatDesc got;
  cudaExtent ext;
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
  EXPECT(ext.width == (size_t)w && ext.height == (size_t)h && ext.depth == (size_t)depth,
         "3D extent %zu %zu %zu", ext.width, ext.height, ext.depth);
  EXPECT(!!(flags & cudaArrayLayered) == layered, "flags %u", flags);
  std::vector<unsigned short> v(w * h * depth);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (unsigned short)(i * 7 + 1);
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(v.data(), w * sizeof(unsigned short), w, h);
  p.dstArray = a;
  p.extent = make_cudaExtent(w, h, depth);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));
  // Out through device memory: a 3D pitched allocation, then one plane back to the host.
  cudaPitchedPtr dp;
  CHECK(cudaMalloc3D(&dp, make_cudaExtent(w * sizeof(unsigned short), h, depth)));
  cudaMemcpy3DParms q = {};
  q.srcArray = a;
  q.dstPtr = dp;
  q.extent = make_cudaExtent(w, h, depth);
  q.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&q));
  std::vector<unsigned short> out(w * h * depth, 0);
  cudaMemcpy3DParms r = {};
  r.srcPtr = dp;
  r.dstPtr = make_cudaPitchedPtr(out.data(), w * sizeof(unsigned short), w, h);
  r.extent = make_cudaExtent(w * sizeof(unsigned short), h, depth);
  r.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&r));
  EXPECT(out == v, "3D round trip differs");
  // One plane straight from the array at z = 2, asynchronously.
  std::vector<unsigned short> plane(w * h, 0);
  cudaMemcpy3DParms t = {};
  t.srcArray = a;
  t.srcPos = make_cudaPos(0, 0, 2);
  t.dstPtr = make_cudaPitchedPtr(plane.data(), w * sizeof(unsigned short), w, h);
  t.extent = make_cudaExtent(w, h, 1);
  t.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&t, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < w * h; ++i) EXPECT(plane[i] == v[2 * w * h + i], "plane at %d", i);
  CHECK(cudaFree(dp.ptr));
  CHECK(cudaFreeArray(a));
}

static void batches() {
  const int n = 3, size = 4096;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<std::vector<unsigned char>> host(n, std::vector<unsigned char>(size));
  std::vector<std::vector<unsigned char>> back(n, std::vector<unsigned char>(size, 0));
  void* dev[n];
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < size; ++j) host[i][j] = (unsigned char)(i * 31 + j);
    CHECK(cudaMalloc(&dev[i], size));
  }
  void* dsts[n];
  const void* srcs[n];
  size_t sizes[n];
  for (int i = 0; i < n; ++i) {
    dsts[i] = dev[i];
    srcs[i] = host[i].data();
    sizes[i] = size;
  }
  cudaMemcpyAttributes attr = {};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &idx, 1, s));
  for (int i = 0; i < n; ++i) {
    dsts[i] = back[i].data();
    srcs[i] = dev[i];
  }
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &idx, 1, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == host[i], "batch copy %d differs", i);

  // 3D batch: a host block into a 2D array at an offset, then out to device memory.
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &fd, 16, 8));
  std::vector<float> block(4 * 3);
  for (int i = 0; i < 12; ++i) block[i] = i * 1.5f;
  cudaMemcpy3DBatchOp op[2] = {};
  op[0].src.type = cudaMemcpyOperandTypePointer;
  op[0].src.op.ptr.ptr = block.data();
  op[0].dst.type = cudaMemcpyOperandTypeArray;
  op[0].dst.op.array.array = a;
  op[0].dst.op.array.offset = {2, 1, 0};  // elements
  op[0].extent = make_cudaExtent(4, 3, 1);
  op[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  float* d;
  CHECK(cudaMalloc((void**)&d, 12 * sizeof(float)));
  op[1].src.type = cudaMemcpyOperandTypeArray;
  op[1].src.op.array.array = a;
  op[1].src.op.array.offset = {2, 1, 0};
  op[1].dst.type = cudaMemcpyOperandTypePointer;
  op[1].dst.op.ptr.ptr = d;
  op[1].extent = make_cudaExtent(4, 3, 1);
  op[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  CHECK(cudaMemcpy3DBatchAsync(2, op, 0, s));
  std::vector<float> out(12, 0);
  CHECK(cudaMemcpyAsync(out.data(), d, 12 * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(out == block, "3D batch copy differs");
  CHECK(cudaFree(d));
  CHECK(cudaFreeArray(a));
  for (int i = 0; i < n; ++i) CHECK(cudaFree(dev[i]));
  CHECK(cudaStreamDestroy(s));
}

int main() {
  size_t free0, total;
  CHECK(cudaFree(0));
  CHECK(cudaMemGetInfo(&free0, &total));
  two_d();
  one_d();
  three_d(false);
  three_d(true);
  batches();
  // Arrays count against device memory while they live, and not after.
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float4>();
  cudaArray_t big;
  CHECK(cudaMallocArray(&big, &fd, 1024, 1024));
  size_t free1;
  CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT(free0 - free1 >= (size_t)16 << 20, "a 16 MiB array took %zu bytes", free0 - free1);
  CHECK(cudaFreeArray(big));
  size_t free2;
  CHECK(cudaMemGetInfo(&free2, &total));
  EXPECT(free2 == free0, "free memory %zu after, %zu before", free2, free0);
  printf("arrays: all checks passed\n");
  return 0;
}
