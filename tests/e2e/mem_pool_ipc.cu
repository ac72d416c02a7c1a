// Memory pools shared between processes through the runtime, as streamOrderedAllocationIPC
// shares them: this program makes a pool that may be exported as a POSIX file descriptor,
// allocates from it in stream order, exports the pool and the allocation, and runs itself
// again as a second process, which inherits the descriptor, imports the pool and the
// allocation, checks what the first wrote, runs a kernel on it and frees its import; the
// first then sees the kernel's result, still owns the memory, and frees it. A pool made
// without handle types is not exported; an imported pool is not allocated from; an allocation
// freed by its exporter is imported no more.
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/e2e/child_process.h"

__global__ void twice_plus(int* p, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 2 + k;
}

static const int kN = 8192;

static cudaMemPool_t import_pool(const char* fd_text) {
  cudaMemPool_t pool;
  const int fd = atoi(fd_text);
  CHECK(cudaMemPoolImportFromShareableHandle(&pool,
                                             reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0));
  close(fd);
  // The device's own pool memory: readable and writable from it.
  cudaMemLocation where = {};
  where.type = cudaMemLocationTypeDevice;
  where.id = 0;
  cudaMemAccessFlags access;
  CHECK(cudaMemPoolGetAccess(&access, pool, &where));
  EXPECT(access == cudaMemAccessFlagsProtReadWrite, "access %d to the imported pool", access);
  return pool;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "import") == 0) {
    cudaMemPool_t pool = import_pool(argv[2]);
    cudaMemPoolPtrExportData data = from_hex<cudaMemPoolPtrExportData>(argv[3]);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* d = nullptr;
    CHECK(cudaMemPoolImportPointer(reinterpret_cast<void**>(&d), pool, &data));
    std::vector<int> h(kN);
    CHECK(cudaMemcpyAsync(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < kN; ++i) EXPECT(h[i] == i + 7, "child: d[%d] = %d", i, h[i]);
    twice_plus<<<(kN + 255) / 256, 256, 0, s>>>(d, kN, 3);
    CHECK(cudaGetLastError());
    void* mine = nullptr;
    EXPECT(cudaMallocFromPoolAsync(&mine, 256, pool, s) != cudaSuccess,
           "an imported pool gave memory of its own");
    cudaGetLastError();
    // The importer frees before the exporter does, as CUDA asks: that ends the import only.
    CHECK(cudaFreeAsync(d, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaMemPoolDestroy(pool));
    printf("child: imported, checked, changed and freed\n");
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "stale") == 0) {
    cudaMemPool_t pool = import_pool(argv[2]);
    cudaMemPoolPtrExportData data = from_hex<cudaMemPoolPtrExportData>(argv[3]);
    void* d = nullptr;
    const cudaError_t e = cudaMemPoolImportPointer(&d, pool, &data);
    EXPECT(e != cudaSuccess, "an allocation its exporter freed was imported");
    cudaGetLastError();
    CHECK(cudaMemPoolDestroy(pool));
    printf("child: the freed allocation was refused (%s)\n", cudaGetErrorName(e));
    return 0;
  }
  int handle_types = 0;
  CHECK(cudaDeviceGetAttribute(&handle_types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  EXPECT(handle_types & cudaMemHandleTypePosixFileDescriptor, "pool handle types %d", handle_types);
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t plain, pool;
  CHECK(cudaMemPoolCreate(&plain, &props));
  int fd = -1;
  EXPECT(cudaMemPoolExportToShareableHandle(&fd, plain, cudaMemHandleTypePosixFileDescriptor, 0) !=
             cudaSuccess,
         "a pool made without handle types was exported");
  cudaGetLastError();
  CHECK(cudaMemPoolDestroy(plain));
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  CHECK(cudaMemPoolCreate(&pool, &props));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* d = nullptr;
  CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&d), kN * sizeof(int), pool, s));
  std::vector<int> h(kN);
  for (int i = 0; i < kN; ++i) h[i] = i + 7;
  CHECK(cudaMemcpyAsync(d, h.data(), kN * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData data;
  CHECK(cudaMemPoolExportPointer(&data, d));
  const std::string hex = to_hex(data);
  EXPECT(run_self(argv[0], {"import", std::to_string(fd), hex}) == 0, "the importing child failed");
  CHECK(cudaMemcpyAsync(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) {
    EXPECT(h[i] == (i + 7) * 2 + 3, "d[%d] = %d after the child's kernel", i, h[i]);
  }
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(run_self(argv[0], {"stale", std::to_string(fd), hex}) == 0,
         "the stale-allocation child failed");
  close(fd);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaMemPoolDestroy(pool));
  printf("mem_pool_ipc: all checks passed\n");
  return 0;
}
