// Pitched allocations, 2D copies both ways and 2D memsets.
#include <vector>

#include "tests/e2e/check.h"

__global__ void bump(unsigned char* p, size_t pitch, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) p[y * pitch + x] += 1;
}

int main() {
  const int w = 100, h = 37;
  unsigned char* d;
  size_t pitch = 0;
  CHECK(cudaMallocPitch((void**)&d, &pitch, w, h));
  EXPECT(pitch >= (size_t)w, "pitch %zu", pitch);
  CHECK(cudaMemset2D(d, pitch, 7, w, h));
  // Host rows 128 apart; only w bytes of each move.
  const size_t hp = 128;
  std::vector<unsigned char> host(hp * h, 0xEE);
  CHECK(cudaMemcpy2D(host.data(), hp, d, pitch, w, h, cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; ++y)
    for (size_t x = 0; x < hp; ++x)
      EXPECT(host[y * hp + x] == (x < (size_t)w ? 7 : 0xEE), "memset2D at %zu,%d", x, y);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) host[y * hp + x] = (unsigned char)(x + y);
  CHECK(cudaMemcpy2D(d, pitch, host.data(), hp, w, h, cudaMemcpyHostToDevice));
  bump<<<dim3((w + 63) / 64, h), 64>>>(d, pitch, w, h);
  CHECK(cudaGetLastError());
  std::vector<unsigned char> out(w * h);
  CHECK(cudaMemcpy2D(out.data(), w, d, pitch, w, h, cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      EXPECT(out[y * w + x] == (unsigned char)(x + y + 1), "at %d,%d: %d", x, y, out[y * w + x]);
  // Device to device, into a second pitched buffer, asynchronously.
  unsigned char* d2;
  size_t pitch2 = 0;
  CHECK(cudaMallocPitch((void**)&d2, &pitch2, w, h));
  CHECK(cudaMemset2DAsync(d2, pitch2, 0, w, h, 0));
  CHECK(cudaMemcpy2DAsync(d2, pitch2, d, pitch, w, h, cudaMemcpyDeviceToDevice, 0));
  std::vector<unsigned char> out2(w * h);
  CHECK(cudaMemcpy2DAsync(out2.data(), w, d2, pitch2, w, h, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(out2 == out, "device-to-device 2D copy differs");
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  printf("ok\n");
  return 0;
}
