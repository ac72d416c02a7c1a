// Pinned host memory under unified addressing: memory from cudaMallocHost and cudaHostAlloc
// (any flags) is read and written by kernels at its host address, and by the host between
// synchronisations; cudaHostGetDevicePointer gives that same address; copies through it work
// as before. Registered memory is reached through cudaHostGetDevicePointer's pointer.
#include <stdlib.h>
#include <string.h>

#include "check.h"

__global__ void scale(const int* in, int* out, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * k;
}

struct Pointers {
  const int* in;
  int* out;
};
__global__ void through_struct(Pointers p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p.out[i] = p.in[i] + 1;
}

int main() {
  const int n = 5000;  // several pages
  int *a, *b, *c, *d_dev;
  CHECK(cudaMallocHost(&a, n * sizeof(int)));
  CHECK(cudaHostAlloc(&b, n * sizeof(int), cudaHostAllocDefault));
  CHECK(cudaHostAlloc(&c, n * sizeof(int), cudaHostAllocWriteCombined | cudaHostAllocPortable));
  CHECK(cudaMalloc(&d_dev, n * sizeof(int)));

  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, a));
  EXPECT(attr.type == cudaMemoryTypeHost, "cudaMallocHost memory has type %d", (int)attr.type);

  // A kernel reads pinned memory the host filled, and writes other pinned memory.
  for (int i = 0; i < n; ++i) a[i] = i;
  scale<<<(n + 255) / 256, 256>>>(a, b, n, 3);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) EXPECT(b[i] == 3 * i, "b[%d] = %d", i, b[i]);

  // The host changes some of it; the next kernel sees the change; pinned to device memory.
  for (int i = 0; i < n; i += 7) a[i] = -i;
  scale<<<(n + 255) / 256, 256>>>(a, d_dev, n, 2);
  CHECK(cudaDeviceSynchronize());
  int* check = new int[n];
  CHECK(cudaMemcpy(check, d_dev, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    int want = (i % 7 == 0 ? -i : i) * 2;
    EXPECT(check[i] == want, "d_dev[%d] = %d, want %d", i, check[i], want);
  }

  // Pointers reach the kernel inside a struct too; write-combined portable memory.
  for (int i = 0; i < n; ++i) c[i] = 10 * i;
  Pointers p{c, b};
  through_struct<<<(n + 127) / 128, 128>>>(p, n);
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) EXPECT(b[i] == 10 * i + 1, "struct: b[%d] = %d", i, b[i]);

  // cudaHostGetDevicePointer: the same address under unified addressing.
  int* dptr = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dptr), a, 0));
  EXPECT(dptr == a, "device pointer %p for host %p", (void*)dptr, (void*)a);

  // Copies to and from pinned memory, synchronous and on a stream.
  int* e;
  CHECK(cudaMallocHost(&e, n * sizeof(int)));
  for (int i = 0; i < n; ++i) e[i] = n - i;
  CHECK(cudaMemcpy(d_dev, e, n * sizeof(int), cudaMemcpyHostToDevice));
  memset(e, 0, n * sizeof(int));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemcpyAsync(e, d_dev, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(e[i] == n - i, "copied e[%d] = %d", i, e[i]);
  // A kernel then reads the bytes the copy wrote into pinned memory.
  scale<<<(n + 255) / 256, 256, 0, s>>>(e, b, n, -1);
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(b[i] == i - n, "after copy: b[%d] = %d", i, b[i]);

  // Registered memory: kernels reach it through the pointer cudaHostGetDevicePointer gives,
  // in place, and the host sees their writes after a synchronisation. The registration covers
  // part of an allocation whose other bytes the host keeps changing: none of them is lost.
  const size_t span = 4 * 4096;
  unsigned char* raw = nullptr;
  EXPECT(posix_memalign(reinterpret_cast<void**>(&raw), 4096, span) == 0, "posix_memalign");
  memset(raw, 0x5a, span);
  int* r = reinterpret_cast<int*>(raw + 128);  // not page aligned
  const int rn = 3000;
  CHECK(cudaHostRegister(r, rn * sizeof(int), cudaHostRegisterMapped));
  int* rd = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&rd), r, 0));
  EXPECT(rd != nullptr, "device pointer of registered memory");
  for (int i = 0; i < rn; ++i) r[i] = 5 * i;
  scale<<<(rn + 255) / 256, 256>>>(rd, rd, rn, 2);
  raw[0] = 1;                                  // before the registration, same page
  raw[128 + rn * sizeof(int) + 10] = 2;        // after it, same page
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < rn; ++i) EXPECT(r[i] == 10 * i, "registered r[%d] = %d", i, r[i]);
  EXPECT(raw[0] == 1 && raw[128 + rn * sizeof(int) + 10] == 2 && raw[127] == 0x5a &&
             raw[span - 1] == 0x5a,
         "bytes around the registration kept");
  for (int i = 0; i < rn; i += 3) r[i] = -1;
  scale<<<(rn + 255) / 256, 256>>>(rd, rd, rn, 3);
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < rn; ++i) {
    int want = i % 3 == 0 ? -3 : 30 * i;
    EXPECT(r[i] == want, "registered again r[%d] = %d, want %d", i, r[i], want);
  }
  CHECK(cudaHostUnregister(r));
  r[0] = 77;  // the app's memory again, writable as before
  EXPECT(r[0] == 77, "after unregister");
  free(raw);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(a));
  CHECK(cudaFreeHost(b));
  CHECK(cudaFreeHost(c));
  CHECK(cudaFreeHost(e));
  CHECK(cudaFree(d_dev));
  delete[] check;
  printf("pinned_kernels: all checks passed\n");
  return 0;
}
