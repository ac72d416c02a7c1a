/* A plain driver-API program: devices, memory, copies. Built against the toolkit's cuda.h and
 * linked like any CUDA program; at run time cuwire's libcuda.so.1 stands in for the driver. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define CHECK(x)                                                             \
  do {                                                                       \
    CUresult r_ = (x);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                \
      const char* s_ = "?";                                                  \
      cuGetErrorName(r_, &s_);                                               \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, s_); \
      return 1;                                                              \
    }                                                                        \
  } while (0)

int main(void) {
  CHECK(cuInit(0));
  int version = 0, count = 0;
  CHECK(cuDriverGetVersion(&version));
  CHECK(cuDeviceGetCount(&count));
  printf("driver version %d, %d device(s)\n", version, count);
  if (count < 1) return 1;
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  char name[128];
  CHECK(cuDeviceGetName(name, sizeof name, dev));
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, dev));
  int major = 0, minor = 0;
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  printf("device 0: %s, %zu MiB, compute %d.%d\n", name, total >> 20, major, minor);

  /* Memory needs a current context: the device's primary one, as the runtime uses. */
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUcontext cur = NULL;
  CHECK(cuCtxGetCurrent(&cur));
  if (cur != ctx) {
    fprintf(stderr, "current context is not the one just set\n");
    return 1;
  }

  enum { N = 1 << 20 };
  static unsigned char src[N], dst[N];
  for (int i = 0; i < N; ++i) src[i] = (unsigned char)(i * 7 + 3);
  CUdeviceptr d;
  CHECK(cuMemAlloc(&d, N));
  CHECK(cuMemcpyHtoD(d, src, N));
  CHECK(cuMemcpyDtoH(dst, d, N));
  if (memcmp(src, dst, N) != 0) {
    fprintf(stderr, "round trip through device memory corrupted the data\n");
    return 1;
  }
  CHECK(cuMemsetD8(d, 0x5a, N));
  CHECK(cuMemcpyDtoH(dst, d, N));
  for (int i = 0; i < N; ++i) {
    if (dst[i] != 0x5a) {
      fprintf(stderr, "memset result wrong at %d\n", i);
      return 1;
    }
  }
  /* A copy past the end of the allocation must be refused, not performed. */
  if (cuMemcpyHtoD(d + N - 16, src, 32) != CUDA_ERROR_INVALID_VALUE) {
    fprintf(stderr, "out-of-range copy was not refused\n");
    return 1;
  }
  CHECK(cuMemFree(d));
  if (cuMemFree(d) != CUDA_ERROR_INVALID_VALUE) {
    fprintf(stderr, "double free was not refused\n");
    return 1;
  }
  printf("memory round trip of %d bytes ok\n", N);

  /* A context of its own: created current, popped, destroyed. */
  CUcontext own;
  CHECK(cuCtxCreate(&own, NULL, 0, dev));
  CUdeviceptr d2;
  CHECK(cuMemAlloc(&d2, 4096));
  CHECK(cuMemFree(d2));
  CUcontext popped;
  CHECK(cuCtxPopCurrent(&popped));
  if (popped != own) {
    fprintf(stderr, "popped the wrong context\n");
    return 1;
  }
  CHECK(cuCtxDestroy(own));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("contexts ok\n");
  return 0;
}
