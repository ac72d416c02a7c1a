// Virtual memory management: a reservation of four granules, three of them mapped to physical
// allocations released right after mapping (the mappings keep them), access set, a kernel run
// over the mapped range with copies in and out; the unmapped fourth granule is refused to
// copies; then everything is unmapped and the reservation freed.
#include <cuda.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/e2e/check.h"
#include "tests/e2e/check_driver.h"

__global__ void add(const float* a, const float* b, float* c, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern char** environ;

__global__ void fill_bytes(unsigned char* p, size_t n, unsigned char v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

// Physical memory pinned on device 0.
static CUmemAllocationProp device_memory() {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

// The second process of the shareable-handle check: imports the physical memory from the
// descriptor it inherited, maps it, checks the first process's bytes and writes its own.
static int import_child(int fd, size_t gran) {
  CHECK(cudaFree(nullptr));
  CUmemGenericAllocationHandle h = 0;
  CU(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, gran, 0, 0, 0));
  CU(cuMemMap(va, gran, 0, h, 0));
  CU(cuMemRelease(h));
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, gran, &access, 1));
  std::vector<unsigned char> seen(gran);
  CHECK(cudaMemcpy(seen.data(), reinterpret_cast<void*>(va), gran, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < gran; i += 4093)
    EXPECT(seen[i] == 0x11, "imported byte %zu: %d", i, seen[i]);
  fill_bytes<<<(unsigned)((gran + 255) / 256), 256>>>(reinterpret_cast<unsigned char*>(va), gran,
                                                      0x22);
  CHECK(cudaDeviceSynchronize());
  CU(cuMemUnmap(va, gran));
  CU(cuMemAddressFree(va, gran));
  return 0;
}

// Physical memory shared with another process through a POSIX file descriptor
// (cuMemExportToShareableHandle), as memMapIPCDrv and NCCL do.
static void shareable_handles(const char* self, size_t gran) {
  int supported = 0;
  CU(cuDeviceGetAttribute(&supported,
                          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
  EXPECT(supported == 1, "the device reports POSIX file descriptor handles");
  CUmemAllocationProp prop = device_memory();
  CUmemGenericAllocationHandle plain = 0;
  CU(cuMemCreate(&plain, gran, &prop, 0));
  int fd = -1;
  EXPECT(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
             CUDA_SUCCESS,
         "memory created without a handle type exported");
  CU(cuMemRelease(plain));
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  CU(cuMemCreate(&h, gran, &prop, 0));
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, gran, 0, 0, 0));
  CU(cuMemMap(va, gran, 0, h, 0));
  CHECK(cudaMemset(reinterpret_cast<void*>(va), 0x11, gran));
  CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  EXPECT(fd >= 0, "a descriptor: %d", fd);
  // A descriptor that is no exported memory is refused.
  const int other = memfd_create("not-a-handle", 0);
  EXPECT(other >= 0 &&
             write(other, "0123456789abcdef0123456789abcdef0123456789abcdef0123456", 56) == 56,
         "a memfd");
  CUmemGenericAllocationHandle bad = 0;
  EXPECT(cuMemImportFromShareableHandle(&bad, reinterpret_cast<void*>(static_cast<intptr_t>(other)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS,
         "a foreign descriptor imported");
  close(other);
  // Another process imports it from the descriptor it inherits, checks and writes.
  const std::string fd_text = std::to_string(fd), gran_text = std::to_string(gran);
  std::vector<char*> argv = {const_cast<char*>(self), const_cast<char*>("import"),
                             const_cast<char*>(fd_text.c_str()),
                             const_cast<char*>(gran_text.c_str()), nullptr};
  pid_t pid = 0;
  EXPECT(posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) == 0, "spawn %s", self);
  int status = 0;
  EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "the importing process failed (status %d)", status);
  std::vector<unsigned char> back(gran);
  CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(va), gran, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < gran; i += 4093)
    EXPECT(back[i] == 0x22, "byte %zu after the importer: %d", i, back[i]);
  // The same process may import it too: one more reference to the same memory.
  CUmemGenericAllocationHandle again = 0;
  CU(cuMemImportFromShareableHandle(&again, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CU(cuMemRelease(again));
  // Released by its creator, the export ends: a later import is refused.
  CU(cuMemRelease(h));
  CU(cuMemUnmap(va, gran));
  CU(cuMemAddressFree(va, gran));
  EXPECT(cuMemImportFromShareableHandle(&again, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS,
         "an import after the memory was released");
  close(fd);
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "import") == 0) {
    return import_child(atoi(argv[2]), static_cast<size_t>(atoll(argv[3])));
  }
  CHECK(cudaFree(nullptr));
  int supported = 0;
  CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  EXPECT(supported == 1, "the device reports virtual memory management");
  CUmemAllocationProp prop = device_memory();
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
  EXPECT(got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED,
         "the handle's properties");
  size_t free_mapped = 0, total = 0;
  CU(cuMemGetInfo(&free_mapped, &total));
  for (int i = 0; i < 3; ++i) CU(cuMemRelease(h[i]));  // the mappings keep the memory
  size_t free_released = 0;
  CU(cuMemGetInfo(&free_released, &total));
  EXPECT(free_released == free_mapped, "released but mapped memory is still in use: %zu, %zu free",
         free_released, free_mapped);
  EXPECT(cuMemRelease(h[0]) != CUDA_SUCCESS, "a handle released twice");
  // The handle of a mapping, asked for again (NCCL does): a reference of its own to release.
  CUmemGenericAllocationHandle again = 0;
  CU(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + gran + 64)));
  EXPECT(again == h[1], "the mapping's handle again: %llx, was %llx", (unsigned long long)again,
         (unsigned long long)h[1]);
  CU(cuMemGetAllocationPropertiesFromHandle(&got, again));
  CU(cuMemRelease(again));
  EXPECT(
      cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + 3 * gran)) != CUDA_SUCCESS,
      "the handle of an unmapped part of the reservation");
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
  EXPECT(cuMemMap(base + 8 * gran, gran, 0, extra, 0) != CUDA_SUCCESS,
         "a map outside the reservation");
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
    EXPECT(back.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC, "compression type %d",
           int(back.allocFlags.compressionType));
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
  // The mapping a pointer lies in.
  CUdeviceptr mapping = 0;
  size_t mapping_size = 0;
  CU(cuPointerGetAttribute(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, base + gran + 100));
  CU(cuPointerGetAttribute(&mapping_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, base + gran + 100));
  EXPECT(mapping == base + gran && mapping_size == gran, "mapping %llx (+%llx), size %zu",
         (unsigned long long)mapping, (unsigned long long)(mapping - base), mapping_size);
  // Copies and memsets across the granules' mappings (PyTorch's expandable segments grow a
  // reservation so): small and large (streamed), synchronous and async, both ways.
  {
    char* mid = reinterpret_cast<char*>(base) + gran - 4096;
    const size_t big = gran + 8192;  // into the third granule, past 1 MiB for 2 MiB granules
    std::vector<char> out(big), back(big, 0);
    for (size_t i = 0; i < big; ++i) out[i] = char(i * 13 + 5);
    CHECK(cudaMemcpy(mid, out.data(), big, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back.data(), mid, big, cudaMemcpyDeviceToHost));
    EXPECT(back == out, "a large copy across mappings came back changed");
    CHECK(cudaMemcpy(mid + 4090, out.data(), 16, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back.data(), mid + 4090, 16, cudaMemcpyDeviceToHost));
    EXPECT(std::memcmp(back.data(), out.data(), 16) == 0, "a 16-byte copy across a boundary");
    CHECK(cudaMemsetAsync(mid + 4000, 0x5a, 200, 0));
    char* dd = reinterpret_cast<char*>(c);
    CHECK(cudaMemcpyAsync(dd, mid + 4000, 200, cudaMemcpyDeviceToDevice, 0));
    CHECK(cudaMemcpyAsync(back.data(), dd, 200, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    for (int i = 0; i < 200; ++i)
      EXPECT(back[i] == 0x5a, "memset across a boundary: [%d] %d", i, back[i]);
  }
  CHECK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  // The fourth granule is reserved but not mapped: no memory there.
  EXPECT(cudaMemcpy(reinterpret_cast<char*>(base) + 3 * gran, ha.data(), 64,
                    cudaMemcpyHostToDevice) != cudaSuccess,
         "a copy into an unmapped part of the reservation is refused");
  cudaGetLastError();

  size_t before_unmap = 0;
  CU(cuMemGetInfo(&before_unmap, &total));
  CU(cuMemUnmap(base, 3 * gran));
  size_t after_unmap = 0;
  CU(cuMemGetInfo(&after_unmap, &total));
  EXPECT(after_unmap >= before_unmap + 3 * gran, "unmapping the released memory frees it: %zu, %zu",
         after_unmap, before_unmap);
  EXPECT(cuMemAddressFree(base, 2 * gran) != CUDA_SUCCESS, "a free of the wrong size is refused");
  CU(cuMemAddressFree(base, 4 * gran));
  shareable_handles(argv[0], gran);
  printf("vmm: all checks passed\n");
  return 0;
}
