// cuBLAS initialises against the driver (export tables included): a handle is created, used
// for a trivial call when the device can run it, and destroyed.
#include <cublas_v2.h>

#include "tests/e2e/check.h"

int main() {
  cublasHandle_t h;
  cublasStatus_t s = cublasCreate(&h);
  EXPECT(s == CUBLAS_STATUS_SUCCESS, "cublasCreate: %d", (int)s);
  int version = 0;
  s = cublasGetVersion(h, &version);
  EXPECT(s == CUBLAS_STATUS_SUCCESS && version > 0, "cublasGetVersion: %d", (int)s);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  s = cublasSetStream(h, stream);
  EXPECT(s == CUBLAS_STATUS_SUCCESS, "cublasSetStream: %d", (int)s);
  s = cublasDestroy(h);
  EXPECT(s == CUBLAS_STATUS_SUCCESS, "cublasDestroy: %d", (int)s);
  CHECK(cudaStreamDestroy(stream));
  printf("ok (cuBLAS %d)\n", version);
  return 0;
}
