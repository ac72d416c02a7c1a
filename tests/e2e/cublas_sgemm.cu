// cuBLAS SGEMM on 512 x 512 matrices: checked against a CPU reference, and printed as one line
// whose checksum (the sum of C and a hash of its bits) must be the same natively and through
// cuwire on the same GPU. The sim does not run cuBLAS's kernels, so this program is
// built for scripts/gpu-check.sh and not registered as a test.
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "tests/e2e/check.h"

int main() {
  const int n = 512;
  const float alpha = 1.25f, beta = 0.5f;
  // Column-major, deterministic, not exactly representable sums: any change in how the GPU
  // sums (another kernel, split-K) shows in the checksum's last digits.
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = sinf(0.001f * i) + 0.25f;
    b[i] = cosf(0.0007f * i) - 0.125f;
    c[i] = 0.01f * (i % 97);
  }
  float *da, *db, *dc;
  const size_t bytes = sizeof(float) * n * n;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), bytes, cudaMemcpyHostToDevice));
  cublasHandle_t h;
  cublasStatus_t s = cublasCreate(&h);
  EXPECT(s == CUBLAS_STATUS_SUCCESS, "cublasCreate: %d", (int)s);
  s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da, n, db, n, &beta, dc, n);
  EXPECT(s == CUBLAS_STATUS_SUCCESS, "cublasSgemm: %d", (int)s);
  std::vector<float> out(n * n);
  CHECK(cudaMemcpy(out.data(), dc, bytes, cudaMemcpyDeviceToHost));
  s = cublasDestroy(h);
  EXPECT(s == CUBLAS_STATUS_SUCCESS, "cublasDestroy: %d", (int)s);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));

  double max_err = 0, sum = 0;
  uint64_t fnv = 1469598103934665603ull;
  for (int col = 0; col < n; ++col) {
    for (int row = 0; row < n; ++row) {
      double ref = 0;
      for (int k = 0; k < n; ++k) ref += (double)a[k * n + row] * b[col * n + k];
      ref = alpha * ref + beta * c[col * n + row];
      const float got = out[col * n + row];
      const double err = fabs(got - ref) / (1.0 + fabs(ref));
      if (err > max_err) max_err = err;
      sum += got;
      uint32_t bits;
      memcpy(&bits, &got, sizeof bits);
      for (int i = 0; i < 4; ++i) fnv = (fnv ^ ((bits >> (8 * i)) & 0xff)) * 1099511628211ull;
    }
  }
  // float32 sums of 512 products: a few units in the last place, scaled by the magnitude.
  const double tolerance = 1e-4;
  EXPECT(max_err <= tolerance, "max relative error %.3g over %.0e", max_err, tolerance);
  printf("cublas_sgemm %dx%dx%d: max error %.3e (<= %.0e), checksum %.17g fnv %016llx\n", n, n, n,
         max_err, tolerance, sum, (unsigned long long)fnv);
  return 0;
}
