// Stream-ordered allocation and memory pools as PyTorch's cudaMallocAsync backend and the
// streamOrderedAllocation sample use them: the device's default pool, configured (release
// threshold, reuse flags), trimmed, its counters read and reset; an explicit pool made current;
// allocations and frees in stream order between kernels; with two devices, a kernel on the
// second reading the first's pool memory once the pool grants it access
// (streamOrderedAllocationP2P).
#include <string.h>

#include "tests/e2e/check.h"

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void add(const int* a, int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] += a[i];
}

static unsigned long long attr64(cudaMemPool_t pool, cudaMemPoolAttr a) {
  unsigned long long v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}

// Device 1's kernel adds device 0's pool memory into its own, with no peer access enabled:
// cudaMemPoolSetAccess alone lets it.
static void pool_access_from_another_device() {
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    printf("mem_pools: one device, no access from another device to check\n");
    return;
  }
  constexpr int n = 5000;
  cudaMemPool_t pool0 = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&pool0, 0));
  CHECK(cudaSetDevice(0));
  cudaStream_t s0, s1;
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  int* src = nullptr;
  CHECK(cudaMallocAsync(&src, n * sizeof(int), s0));
  fill<<<(n + 255) / 256, 256, 0, s0>>>(src, n, 1000);
  cudaEvent_t filled;
  CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  CHECK(cudaEventRecord(filled, s0));

  CHECK(cudaSetDevice(1));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  int* dst = nullptr;
  CHECK(cudaMallocAsync(&dst, n * sizeof(int), s1));
  fill<<<(n + 255) / 256, 256, 0, s1>>>(dst, n, 0);
  cudaMemLocation where = {};
  where.type = cudaMemLocationTypeDevice;
  where.id = 1;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(cudaMemPoolGetAccess(&flags, pool0, &where));
  EXPECT(flags == cudaMemAccessFlagsProtNone,
         "device 1 reaches device 0's pool before it is "
         "granted (flags %d)",
         (int)flags);
  cudaMemAccessDesc desc = {};
  desc.location = where;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  const cudaError_t granted = cudaMemPoolSetAccess(pool0, &desc, 1);
  if (granted == cudaErrorNotSupported) {
    // A server whose sessions share one process's contexts (the cuda backend, a relay on a
    // client library without session connections) refuses it: the grant would reach other
    // tenants' kernels on device 1 too.
    printf("mem_pools: the server refuses device 1 a grant to device 0's pool\n");
    CHECK(cudaFreeAsync(dst, s1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaFreeAsync(src, s0));
    CHECK(cudaStreamSynchronize(s0));
    CHECK(cudaStreamDestroy(s0));
    CHECK(cudaSetDevice(1));
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaEventDestroy(filled));
    return;
  }
  CHECK(granted);
  CHECK(cudaMemPoolGetAccess(&flags, pool0, &where));
  EXPECT(flags == cudaMemAccessFlagsProtReadWrite, "the grant does not show (flags %d)",
         (int)flags);
  CHECK(cudaStreamWaitEvent(s1, filled, 0));
  add<<<(n + 255) / 256, 256, 0, s1>>>(src, dst, n);
  CHECK(cudaGetLastError());
  static int host[n];
  CHECK(cudaMemcpyAsync(host, dst, sizeof host, cudaMemcpyDeviceToHost, s1));
  CHECK(cudaFreeAsync(src, s1));
  CHECK(cudaFreeAsync(dst, s1));
  CHECK(cudaStreamSynchronize(s1));
  for (int i = 0; i < n; ++i) {
    EXPECT(host[i] == 1000 + 2 * i, "element %d = %d read across devices, want %d", i, host[i],
           1000 + 2 * i);
  }
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamDestroy(s0));
  CHECK(cudaEventDestroy(filled));
}

int main() {
  cudaMemPool_t pool = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaMemPool_t current = nullptr;
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(current == pool, "the default pool is current");
  // The default pool is the program's to configure.
  unsigned long long threshold = ~0ull;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  EXPECT(attr64(pool, cudaMemPoolAttrReleaseThreshold) == threshold, "release threshold");
  int flag = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag));
  EXPECT(flag == 0, "reuse flag %d", flag);
  EXPECT(cudaMemPoolDestroy(pool) == cudaErrorInvalidValue, "the default pool stays");
  (void)cudaGetLastError();  // the error just expected

  // Allocations in stream order, counted by the pool.
  const int n = 1 << 16;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMallocAsync(&a, n * sizeof(int), s));
  CHECK(cudaMallocAsync(&b, n * sizeof(int), s));
  fill<<<n / 256, 256, 0, s>>>(a, n, 1);
  fill<<<n / 256, 256, 0, s>>>(b, n, 10);
  add<<<n / 256, 256, 0, s>>>(a, b, n);
  int* host = (int*)malloc(n * sizeof(int));
  CHECK(cudaMemcpyAsync(host, b, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(host[i] == 11 + 2 * i, "b[%d] = %d", i, host[i]);
  EXPECT(attr64(pool, cudaMemPoolAttrUsedMemCurrent) >= 2ull * n * sizeof(int), "used %llu",
         attr64(pool, cudaMemPoolAttrUsedMemCurrent));
  EXPECT(attr64(pool, cudaMemPoolAttrReservedMemCurrent) >=
             attr64(pool, cudaMemPoolAttrUsedMemCurrent),
         "reserved below used");
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaFreeAsync(b, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(attr64(pool, cudaMemPoolAttrUsedMemCurrent) == 0, "used after the frees %llu",
         attr64(pool, cudaMemPoolAttrUsedMemCurrent));
  EXPECT(attr64(pool, cudaMemPoolAttrUsedMemHigh) >= 2ull * n * sizeof(int), "high mark");
  unsigned long long zero = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  EXPECT(attr64(pool, cudaMemPoolAttrUsedMemHigh) == 0, "high mark reset");
  CHECK(cudaMemPoolTrimTo(pool, 0));

  // An explicit pool made the device's current one serves cudaMallocAsync; destroying it
  // gives the place back to the default pool.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine = nullptr;
  CHECK(cudaMemPoolCreate(&mine, &props));
  CHECK(cudaDeviceSetMemPool(0, mine));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(current == mine, "the explicit pool is current");
  CHECK(cudaMallocAsync(&a, 4096, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(attr64(mine, cudaMemPoolAttrUsedMemCurrent) >= 4096, "used in the explicit pool");
  EXPECT(attr64(pool, cudaMemPoolAttrUsedMemCurrent) == 0, "nothing in the default pool");
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolDestroy(mine));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  EXPECT(current == pool, "the default pool is current again");
  CHECK(cudaMallocAsync(&a, 4096, s));
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  free(host);
  pool_access_from_another_device();
  printf("mem_pools: all checks passed\n");
  return 0;
}
