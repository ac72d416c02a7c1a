// Pinned host memory under unified addressing: memory from cudaMallocHost and cudaHostAlloc
// (any flags) is read and written by kernels at its host address, and by the host between
// synchronisations; cudaHostGetDevicePointer gives that same address; copies through it work
// as before. Registered memory is reached through cudaHostGetDevicePointer's pointer.
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "tests/e2e/check.h"

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
  // Mapped for the device at the same address, as under unified addressing.
  EXPECT(attr.devicePointer == a && attr.hostPointer == a,
         "cudaMallocHost memory: device pointer %p, host pointer %p", attr.devicePointer,
         attr.hostPointer);
  CHECK(cudaPointerGetAttributes(&attr, c + 7));
  EXPECT(attr.devicePointer == c + 7, "write-combined memory: device pointer %p of %p",
         attr.devicePointer, static_cast<void*>(c + 7));

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
  CHECK(cudaPointerGetAttributes(&attr, r + 5));
  EXPECT(
      attr.type == cudaMemoryTypeHost && attr.devicePointer == rd + 5 && attr.hostPointer == r + 5,
      "registered memory's attributes: type %d, device %p (want %p), host %p", (int)attr.type,
      attr.devicePointer, static_cast<void*>(rd + 5), attr.hostPointer);
  for (int i = 0; i < rn; ++i) r[i] = 5 * i;
  scale<<<(rn + 255) / 256, 256>>>(rd, rd, rn, 2);
  raw[0] = 1;                            // before the registration, same page
  raw[128 + rn * sizeof(int) + 10] = 2;  // after it, same page
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

  // The driver's CU_POINTER_ATTRIBUTE_DEVICE_POINTER of registered memory no one asked a device
  // pointer of yet: it gives one, which kernels reach the memory through.
  std::vector<int> reg(1000);
  for (int i = 0; i < 1000; ++i) reg[i] = i;
  CHECK(cudaHostRegister(reg.data(), reg.size() * sizeof(int), cudaHostRegisterDefault));
  CUdeviceptr regd = 0;
  const CUresult got = cuPointerGetAttribute(&regd, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                             reinterpret_cast<CUdeviceptr>(reg.data()));
  EXPECT(got == CUDA_SUCCESS && regd != 0, "registered memory's device pointer: %d, 0x%llx",
         static_cast<int>(got), static_cast<unsigned long long>(regd));
  if (regd) {
    scale<<<4, 256>>>(reinterpret_cast<int*>(regd), reinterpret_cast<int*>(regd), 1000, 4);
    CHECK(cudaDeviceSynchronize());
    EXPECT(reg[999] == 3996, "through the attribute's pointer: reg[999] = %d", reg[999]);
  }
  CHECK(cudaHostUnregister(reg.data()));
  // Host memory no one pinned has none.
  int plain = 0;
  EXPECT(cuPointerGetAttribute(&regd, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                               reinterpret_cast<CUdeviceptr>(&plain)) != CUDA_SUCCESS,
         "a device pointer of unpinned host memory");
  // Synchronous memory operations (what Open MPI and UCX set on their buffers): for device and
  // pinned memory; nothing else is settable, and unknown memory is refused.
  const unsigned on = 1;
  EXPECT(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                               reinterpret_cast<CUdeviceptr>(d_dev)) == CUDA_SUCCESS,
         "SYNC_MEMOPS on device memory");
  EXPECT(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                               reinterpret_cast<CUdeviceptr>(a)) == CUDA_SUCCESS,
         "SYNC_MEMOPS on pinned memory");
  EXPECT(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                               reinterpret_cast<CUdeviceptr>(&plain)) != CUDA_SUCCESS,
         "SYNC_MEMOPS on unpinned host memory");
  EXPECT(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_MAPPED,
                               reinterpret_cast<CUdeviceptr>(d_dev)) != CUDA_SUCCESS,
         "a pointer attribute that cannot be set");

  CHECK(cudaStreamDestroy(s));
  for (int* p : {a, b, c, e}) CHECK(cudaFreeHost(p));
  CHECK(cudaFree(d_dev));
  delete[] check;
  printf("pinned_kernels: all checks passed\n");
  return 0;
}
