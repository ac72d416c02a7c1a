// Virtual memory management: a reservation of four granules, three of them mapped to physical
// allocations released right after mapping (the mappings keep them), access set, a kernel run
// over the mapped range with copies in and out; the unmapped fourth granule is refused to
// copies; then everything is unmapped and the reservation freed.
#include <cuda.h>

#include <vector>

#include "check.h"
#include "check_driver.h"

__global__ void add(const float* a, const float* b, float* c, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  CHECK(cudaFree(nullptr));
  int supported = 0;
  CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  EXPECT(supported == 1, "the device reports virtual memory management");
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT(gran > 0 && (gran & (gran - 1)) == 0, "granularity %zu", gran);
  CUdeviceptr base = 0;
  CU(cuMemAddressReserve(&base, 4 * gran, 0, 0, 0));
  CUmemGenericAllocationHandle h[3];
  for (int i = 0; i < 3; ++i) {
    CU(cuMemCreate(&h[i], gran, &prop, 0));
    CU(cuMemMap(base + i * gran, gran, 0, h[i], 0));
  }
  CUmemAllocationProp got = {};
  CU(cuMemGetAllocationPropertiesFromHandle(&got, h[1]));
  EXPECT(got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED, "the handle's properties");
  for (int i = 0; i < 3; ++i) CU(cuMemRelease(h[i]));  // the mappings keep the memory
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(base, 3 * gran, &access, 1));
  unsigned long long flags = 0;
  CU(cuMemGetAccess(&flags, &prop.location, base + gran));
  EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access flags %llu", flags);
  // Mapping over a mapped granule, or outside the reservation, is refused.
  CUmemGenericAllocationHandle extra;
  CU(cuMemCreate(&extra, gran, &prop, 0));
  EXPECT(cuMemMap(base, gran, 0, extra, 0) != CUDA_SUCCESS, "a granule mapped twice");
  EXPECT(cuMemMap(base + 8 * gran, gran, 0, extra, 0) != CUDA_SUCCESS, "a map outside the reservation");
  CU(cuMemRelease(extra));
  // Generic compression where the device says it has it: asked for, it is what the handle reports.
  int compression = 0;
  CU(cuDeviceGetAttribute(&compression, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED, 0));
  if (compression) {
    CUmemAllocationProp compressible = prop;
    compressible.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
    CU(cuMemCreate(&extra, gran, &compressible, 0));
    CUmemAllocationProp back{};
    CU(cuMemGetAllocationPropertiesFromHandle(&back, extra));
    EXPECT(back.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC,
           "compression type %d", int(back.allocFlags.compressionType));
    CU(cuMemRelease(extra));
  }

  // Three arrays, one per granule, the sum spanning granules' boundaries too.
  const size_t n = gran / sizeof(float);
  float* a = reinterpret_cast<float*>(base);
  float* b = a + n;
  float* c = b + n;
  std::vector<float> ha(n), hb(n), hc(n);
  for (size_t i = 0; i < n; ++i) {
    ha[i] = float(i % 1000);
    hb[i] = float(i % 7) * 0.5f;
  }
  CHECK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(hc.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) EXPECT(hc[i] == ha[i] + hb[i], "c[%zu] = %f", i, hc[i]);
  // The fourth granule is reserved but not mapped: no memory there.
  EXPECT(cudaMemcpy(reinterpret_cast<char*>(base) + 3 * gran, ha.data(), 64, cudaMemcpyHostToDevice) != cudaSuccess,
         "a copy into an unmapped part of the reservation is refused");
  cudaGetLastError();

  CU(cuMemUnmap(base, 3 * gran));
  EXPECT(cuMemAddressFree(base, 2 * gran) != CUDA_SUCCESS, "a free of the wrong size is refused");
  CU(cuMemAddressFree(base, 4 * gran));
  printf("vmm: all checks passed\n");
  return 0;
}
