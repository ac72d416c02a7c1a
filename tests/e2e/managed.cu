// Unified memory: cudaMallocManaged buffers written on the host, used by kernels, read back on
// the host after a synchronisation; repeated, with two buffers, copies, memsets and frees.
// Then mapped pinned ("zero-copy") memory: cudaHostAlloc(cudaHostAllocMapped) buffers that a
// kernel reads and writes through cudaHostGetDevicePointer.
#include <string.h>

#include "tests/e2e/check.h"

__global__ void scale_add(const int* a, int* b, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = b[i] * k + a[i];
}

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

int main() {
  // Spans several pages, with a partial last page.
  const int n = 3000;
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMallocManaged(&a, n * sizeof(int)));
  CHECK(cudaMallocManaged(&b, n * sizeof(int)));
  EXPECT(a && b && a != b, "two managed buffers");

  // The pointer is both a device and a host pointer, and says it is managed.
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, a));
  EXPECT(attr.type == cudaMemoryTypeManaged, "type %d", (int)attr.type);
  EXPECT(attr.devicePointer == a && attr.hostPointer == a, "same pointer on both sides");

  // Host init, kernel, synchronise, host reads.
  for (int i = 0; i < n; ++i) {
    a[i] = i;
    b[i] = 1;
  }
  scale_add<<<(n + 255) / 256, 256>>>(a, b, n, 2);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) EXPECT(b[i] == 2 + i, "b[%d] = %d", i, b[i]);

  // Repeated launches; the host changes a few elements (some pages only) in between.
  long expect_b[n];
  for (int i = 0; i < n; ++i) expect_b[i] = b[i];
  for (int it = 0; it < 4; ++it) {
    int j = (it * 977) % n;
    a[j] = 1000 * (it + 1);
    for (int i = 0; i < n; ++i) expect_b[i] = expect_b[i] * 3 + a[i];
    scale_add<<<(n + 255) / 256, 256>>>(a, b, n, 3);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) {
      EXPECT(b[i] == (int)expect_b[i], "iteration %d: b[%d] = %d, want %ld", it, i, b[i],
             expect_b[i]);
    }
  }

  // The device writes a buffer the host has not touched since the last synchronisation.
  fill<<<(n + 255) / 256, 256>>>(a, n, 7);
  CHECK(cudaStreamSynchronize(0));
  for (int i = 0; i < n; ++i) EXPECT(a[i] == 7 + i, "a[%d] = %d after fill", i, a[i]);

  // cudaMemcpy from and to managed memory, with explicit and default kinds.
  int host[n];
  for (int i = 0; i < n; ++i) host[i] = -i;
  CHECK(cudaMemcpy(a, host, n * sizeof(int), cudaMemcpyHostToDevice));
  for (int i = 0; i < n; ++i) EXPECT(a[i] == -i, "a[%d] = %d after copy in", i, a[i]);
  b[5] = 12345;  // a host write just before a copy out of the same buffer
  int back[n];
  CHECK(cudaMemcpy(back, b, n * sizeof(int), cudaMemcpyDefault));
  EXPECT(back[5] == 12345, "copy out sees the host write: %d", back[5]);
  for (int i = 0; i < n; ++i) EXPECT(back[i] == b[i], "back[%d] = %d vs %d", i, back[i], b[i]);
  CHECK(cudaMemcpy(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice));
  for (int i = 0; i < n; ++i) EXPECT(b[i] == -i, "b[%d] = %d after managed-to-managed", i, b[i]);
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  fill<<<(n + 255) / 256, 256>>>(d, n, 100);
  CHECK(cudaMemcpy(a, d, n * sizeof(int), cudaMemcpyDeviceToHost));  // managed as host memory
  for (int i = 0; i < n; ++i) EXPECT(a[i] == 100 + i, "a[%d] = %d after copy from device", i, a[i]);
  scale_add<<<(n + 255) / 256, 256>>>(a, b, n, 1);  // the device sees that copy too
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) EXPECT(b[i] == 100, "b[%d] = %d", i, b[i]);

  // cudaMemset on managed memory, then the host overwrites part of it.
  CHECK(cudaMemset(b, 0, n * sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) EXPECT(b[i] == 0, "b[%d] = %d after memset", i, b[i]);
  memset(b, 0xff, 16);
  CHECK(cudaMemcpy(back, b, 8 * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(back[0] == -1 && back[3] == -1 && back[4] == 0, "memset then host write");

  // Prefetch and advice are accepted, and the range attributes answer what they set: for the
  // whole range only where every page has it.
  {
    const size_t bytes = n * sizeof(int);
    const cudaMemLocation dev0{cudaMemLocationTypeDevice, 0}, host{cudaMemLocationTypeHost, 0};
    int v = -7;
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, a, bytes));
    EXPECT(v == 0, "read-mostly before any advice: %d", v);
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocation, a, bytes));
    EXPECT(v == cudaInvalidDeviceId, "preferred location before any advice: %d", v);
    CHECK(cudaMemAdvise(a, bytes, cudaMemAdviseSetReadMostly, dev0));
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, a, bytes));
    EXPECT(v == 1, "read-mostly after the advice: %d", v);
    // The host prefers the first page, device 0 the rest: the range has no one preference.
    CHECK(cudaMemAdvise(a, bytes, cudaMemAdviseSetPreferredLocation, dev0));
    CHECK(cudaMemAdvise(a, 4, cudaMemAdviseSetPreferredLocation, host));
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocation, a, bytes));
    EXPECT(v == cudaInvalidDeviceId, "a split preference: %d", v);
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocation, a, 4));
    EXPECT(v == cudaCpuDeviceId, "the first page's preference: %d", v);
    cudaMemLocationType type = cudaMemLocationTypeInvalid;
    CHECK(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributePreferredLocationType,
                                   a + n - 1, sizeof(int)));
    EXPECT(type == cudaMemLocationTypeDevice, "the last page's preference type: %d", (int)type);
    // Accessed by device 0: listed, the rest of the array invalid; unset again: gone.
    CHECK(cudaMemAdvise(a, bytes, cudaMemAdviseSetAccessedBy, dev0));
    int by[3] = {9, 9, 9};
    CHECK(cudaMemRangeGetAttribute(by, sizeof by, cudaMemRangeAttributeAccessedBy, a, bytes));
    EXPECT(by[0] == 0 && by[1] == cudaInvalidDeviceId && by[2] == cudaInvalidDeviceId,
           "accessed by: %d %d %d", by[0], by[1], by[2]);
    CHECK(cudaMemAdvise(a, bytes, cudaMemAdviseUnsetAccessedBy, dev0));
    CHECK(cudaMemRangeGetAttribute(by, sizeof by, cudaMemRangeAttributeAccessedBy, a, bytes));
    EXPECT(by[0] == cudaInvalidDeviceId, "accessed by after the unset: %d", by[0]);
    // The last prefetch, several attributes at once.
    CHECK(cudaMemPrefetchAsync(a, bytes, dev0, 0, 0));
    int last = -7, mostly = -7;
    void* data[2] = {&last, &mostly};
    size_t sizes[2] = {sizeof last, sizeof mostly};
    cudaMemRangeAttribute attrs[2] = {cudaMemRangeAttributeLastPrefetchLocation,
                                      cudaMemRangeAttributeReadMostly};
    CHECK(cudaMemRangeGetAttributes(data, sizes, attrs, 2, a, bytes));
    EXPECT(last == 0 && mostly == 1, "last prefetch %d, read-mostly %d", last, mostly);
    // What CUDA refuses: a device that is not there, a size that is not 4, memory that is not
    // managed.
    EXPECT(cudaMemAdvise(a, bytes, cudaMemAdviseSetPreferredLocation,
                         cudaMemLocation{cudaMemLocationTypeDevice, 7}) == cudaErrorInvalidDevice,
           "advice for device 7");
    cudaGetLastError();
    EXPECT(cudaMemRangeGetAttribute(&v, 8, cudaMemRangeAttributeReadMostly, a, bytes) ==
               cudaErrorInvalidValue,
           "a read-mostly answer of 8 bytes");
    cudaGetLastError();
    EXPECT(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, d, 4) ==
               cudaErrorInvalidValue,
           "attributes of memory that is not managed");
    cudaGetLastError();
  }
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaFree(d));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  // Freed and allocated again: a fresh mirror, zeroed as the device memory is.
  int* c = nullptr;
  CHECK(cudaMallocManaged(&c, 100 * sizeof(int)));
  {
    int mostly = -7;  // the advice went with the memory it was given for
    CHECK(cudaMemRangeGetAttribute(&mostly, sizeof mostly, cudaMemRangeAttributeReadMostly, c,
                                   100 * sizeof(int)));
    EXPECT(mostly == 0, "a new allocation is read-mostly: %d", mostly);
  }
  c[99] = 5;
  fill<<<1, 64>>>(c, 64, 1);
  CHECK(cudaDeviceSynchronize());
  EXPECT(c[0] == 1 && c[63] == 64 && c[64] == 0 && c[99] == 5, "fresh buffer: %d %d %d %d", c[0],
         c[63], c[64], c[99]);
  CHECK(cudaFree(c));

  // Zero-copy: the host writes, a kernel updates through the device pointer, the host reads.
  int *zh = nullptr, *zd = nullptr;
  CHECK(cudaHostAlloc((void**)&zh, n * sizeof(int), cudaHostAllocMapped));
  for (int i = 0; i < n; ++i) zh[i] = 2 * i;
  CHECK(cudaHostGetDevicePointer((void**)&zd, zh, 0));
  int* src = nullptr;
  CHECK(cudaMalloc((void**)&src, n * sizeof(int)));
  fill<<<(n + 255) / 256, 256>>>(src, n, 7);
  scale_add<<<(n + 255) / 256, 256>>>(src, zd, n, 3);
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) EXPECT(zh[i] == 6 * i + 7 + i, "zero-copy at %d: %d", i, zh[i]);
  unsigned flags = 0;
  CHECK(cudaHostGetFlags(&flags, zh));
  EXPECT(flags & cudaHostAllocMapped, "flags %u", flags);
  // Plain pinned memory stays host memory: copies in and out work as usual.
  int* pinned = nullptr;
  CHECK(cudaMallocHost((void**)&pinned, n * sizeof(int)));
  CHECK(cudaMemcpy(pinned, zd, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(pinned[i] == zh[i], "copy from zero-copy memory at %d", i);
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(src));
  CHECK(cudaFreeHost(zh));
  printf("ok\n");
  return 0;
}
