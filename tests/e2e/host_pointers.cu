// A faulty program's bad host pointers: NULL, an inaccessible page, a buffer that runs into a
// guard page, read-only memory as a destination. Each copy fails with cudaErrorInvalidValue,
// as the driver reports it, and the program goes on: later copies and kernels work.
#include <sys/mman.h>
#include <unistd.h>

#include <string.h>

#include "tests/e2e/check.h"

__global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static int g_checks = 0;

static void expect_invalid(cudaError_t e, const char* what, int line) {
  if (e != cudaErrorInvalidValue) {
    fprintf(stderr, "%s:%d: %s gave %s, expected cudaErrorInvalidValue\n", __FILE__, line, what,
            cudaGetErrorName(e));
    exit(1);
  }
  cudaGetLastError();  // not sticky: clear it as a program would
  ++g_checks;
}
#define EXPECT_INVALID(x) expect_invalid((x), #x, __LINE__)

// The device still works, with the right data, through every path used above.
static void normal_work(cudaStream_t s) {
  const int n = 1000;
  int h[n], back[n];
  for (int i = 0; i < n; ++i) h[i] = i * 3;
  int* d;
  CHECK(cudaMalloc(&d, sizeof h));
  CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  add_one<<<(n + 255) / 256, 256>>>(d, n);
  CHECK(cudaGetLastError());
  memset(back, 0, sizeof back);
  CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == i * 3 + 1, "back[%d] = %d", i, back[i]);
  CHECK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, s));
  add_one<<<(n + 255) / 256, 256, 0, s>>>(d, n);
  memset(back, 0, sizeof back);
  CHECK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == i * 3 + 1, "async back[%d] = %d", i, back[i]);
  memset(back, 0, sizeof back);
  CHECK(cudaMemcpy2D(back, 40 * sizeof(int), d, 40 * sizeof(int), 40 * sizeof(int), 25,
                     cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == i * 3 + 1, "2D back[%d] = %d", i, back[i]);
  CHECK(cudaFree(d));
}

int main() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  normal_work(s);

  // Three pages: two readable and writable, then a guard page.
  char* region = static_cast<char*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  EXPECT(region != MAP_FAILED, "mmap");
  EXPECT(mprotect(region + 2 * page, page, PROT_NONE) == 0, "mprotect");
  char* short_buf = region + 2 * page - 32;  // 32 good bytes, then the guard page
  char* none =
      static_cast<char*>(mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  EXPECT(none != MAP_FAILED, "mmap PROT_NONE");
  // Never mapped: below vm.mmap_min_addr (an unmapped hole elsewhere could be reused).
  char* gone = reinterpret_cast<char*>(page);
  char* readonly =
      static_cast<char*>(mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  EXPECT(readonly != MAP_FAILED, "mmap PROT_READ");

  const size_t n = 64;
  char* d;
  CHECK(cudaMalloc(&d, 4096));
  CHECK(cudaMemset(d, 7, 4096));

  const void* bad_src[] = {nullptr, none, gone, short_buf};
  void* bad_dst[] = {nullptr, none, gone, short_buf, readonly};

  // Synchronous and asynchronous 1D copies, explicit kinds and cudaMemcpyDefault.
  for (const void* src : bad_src) {
    EXPECT_INVALID(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
    EXPECT_INVALID(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
    if (src) {
      EXPECT_INVALID(cudaMemcpy(d, src, n, cudaMemcpyDefault));
      EXPECT_INVALID(cudaMemcpyAsync(d, src, n, cudaMemcpyDefault, s));
    }
  }
  for (void* dst : bad_dst) {
    EXPECT_INVALID(cudaMemcpy(dst, d, n, cudaMemcpyDeviceToHost));
    EXPECT_INVALID(cudaMemcpyAsync(dst, d, n, cudaMemcpyDeviceToHost, s));
    if (dst) {
      EXPECT_INVALID(cudaMemcpy(dst, d, n, cudaMemcpyDefault));
      EXPECT_INVALID(cudaMemcpyAsync(dst, d, n, cudaMemcpyDefault, s));
    }
  }
  CHECK(cudaStreamSynchronize(s));

  // 2D copies: 4 rows of 16 bytes, pitch 32; the short buffer's last row runs into the guard.
  const size_t pitch = 32, width = 16, rows = 4;
  char* short_2d = region + 2 * page - (pitch * (rows - 1) + width / 2);
  const void* bad_src_2d[] = {nullptr, none, gone, short_2d};
  void* bad_dst_2d[] = {nullptr, none, gone, short_2d, readonly};
  for (const void* src : bad_src_2d) {
    EXPECT_INVALID(cudaMemcpy2D(d, 64, src, pitch, width, rows, cudaMemcpyHostToDevice));
    EXPECT_INVALID(cudaMemcpy2DAsync(d, 64, src, pitch, width, rows, cudaMemcpyHostToDevice, s));
  }
  for (void* dst : bad_dst_2d) {
    EXPECT_INVALID(cudaMemcpy2D(dst, pitch, d, 64, width, rows, cudaMemcpyDeviceToHost));
    EXPECT_INVALID(cudaMemcpy2DAsync(dst, pitch, d, 64, width, rows, cudaMemcpyDeviceToHost, s));
  }
  // Arrays with a host end.
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<unsigned char>();
  cudaArray_t arr;
  CHECK(cudaMallocArray(&arr, &fmt, 64, 4));
  EXPECT_INVALID(cudaMemcpy2DToArray(arr, 0, 0, none, 64, 64, 4, cudaMemcpyHostToDevice));
  EXPECT_INVALID(cudaMemcpy2DFromArray(readonly, 64, arr, 0, 0, 64, 4, cudaMemcpyDeviceToHost));
  EXPECT_INVALID(
      cudaMemcpy2DToArrayAsync(arr, 0, 0, short_buf, 64, 64, 4, cudaMemcpyHostToDevice, s));
  CHECK(cudaFreeArray(arr));
  // 3D with a host end.
  cudaMemcpy3DParms p3 = {};
  p3.srcPtr = make_cudaPitchedPtr(none, 64, 64, 2);
  p3.dstPtr = make_cudaPitchedPtr(d, 64, 64, 2);
  p3.extent = make_cudaExtent(64, 2, 2);
  p3.kind = cudaMemcpyHostToDevice;
  EXPECT_INVALID(cudaMemcpy3D(&p3));
  EXPECT_INVALID(cudaMemcpy3DAsync(&p3, s));

  // Batch copies (CUDA 12.8+): the batch fails at its bad copy.
  {
    char good[n];
    memset(good, 7, sizeof good);
    cudaMemcpyAttributes attr = {};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_idx = 0;
    void* dsts[2] = {d, d + n};
    const void* srcs[2] = {good, none};
    size_t sizes[2] = {n, n};
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &attr_idx, 1, s));
    void* back_dsts[1] = {readonly};
    const void* back_srcs[1] = {d};
    EXPECT_INVALID(cudaMemcpyBatchAsync(back_dsts, back_srcs, sizes, 1, &attr, &attr_idx, 1, s));
    CHECK(cudaStreamSynchronize(s));
  }

  // Pinned memory: the copy's end past the pinned block and into the guard page.
  char* pinned;
  CHECK(cudaHostRegister(region, 2 * page, cudaHostRegisterDefault));
  pinned = region + page;
  EXPECT_INVALID(cudaMemcpyAsync(d, pinned + page - 16, n, cudaMemcpyHostToDevice, s));
  EXPECT_INVALID(cudaMemcpyAsync(pinned + page - 16, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) EXPECT(pinned[i] == 7, "pinned[%zu] = %d", i, pinned[i]);
  CHECK(cudaHostUnregister(region));

  // Nothing went out for the failed copies: the device memory is as it was.
  char back[4096];
  CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizeof back; ++i) EXPECT(back[i] == 7, "back[%zu] = %d", i, back[i]);
  // A good buffer right before the guard page still works to its last byte.
  CHECK(cudaMemcpy(short_buf, d, 32, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(d, short_buf, 32, cudaMemcpyHostToDevice));
  CHECK(cudaFree(d));

  normal_work(s);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaDeviceSynchronize());
  printf("host_pointers: %d bad copies refused, all checks passed\n", g_checks);
  return 0;
}
