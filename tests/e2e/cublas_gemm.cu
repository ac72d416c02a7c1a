// cuBLAS GEMMs on the simulated GPU (gpu-server --sim-profile next). CUDA 13's cuBLASLt ships
// the GEMM kernels it picks for compute capability 12.x and below as SASS only; for a newer
// device it picks kernels it ships as PTX ("forwardCompat"), which the interpreter runs,
// tensor-core MMA and ldmatrix included. SGEMM and DGEMM with every transpose combination,
// alpha and beta, odd sizes, and a strided batch; half and bfloat16 GEMMs (cublasGemmEx, f32
// accumulation) and SGEMM in TF32 tensor-op mode; each against a host reference.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <type_traits>
#include <vector>

#include "tests/e2e/check.h"

#define BLAS_CHECK(x)                                                                \
  do {                                                                               \
    cublasStatus_t s_ = (x);                                                         \
    EXPECT(s_ == CUBLAS_STATUS_SUCCESS, "%s returned cublasStatus %d", #x, (int)s_); \
  } while (0)

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                    const float* beta, float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const double* alpha, const double* a, int lda, const double* b, int ldb,
                    const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// A strided batch of products, the matrices of each packed one after another.
template <typename T>
cublasStatus_t gemm_batched(cublasHandle_t h, int m, int n, int k, const T* alpha, const T* a,
                            const T* b, const T* beta, T* c, int batch) {
  const long long sa = static_cast<long long>(m) * k, sb = static_cast<long long>(k) * n,
                  sc = static_cast<long long>(m) * n;
  if constexpr (std::is_same_v<T, float>) {
    return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, m, sa, b, k,
                                     sb, beta, c, m, sc, batch);
  } else {
    return cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, m, sa, b, k,
                                     sb, beta, c, m, sc, batch);
  }
}

template <typename T>
std::vector<T> filled(size_t n, double f, double shift) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(sin(f * i) + shift);
  return v;
}

// Relative error of C = alpha op(A) op(B) + beta C0 against a double-precision host product.
template <typename T>
double check(const std::vector<T>& a, const std::vector<T>& b, const std::vector<T>& c0,
             const std::vector<T>& got, bool ta, bool tb, int m, int n, int k, double alpha,
             double beta) {
  const int lda = ta ? k : m, ldb = tb ? n : k;
  double max_err = 0;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int l = 0; l < k; ++l) {
        const double x =
            ta ? a[static_cast<size_t>(i) * lda + l] : a[static_cast<size_t>(l) * lda + i];
        const double y =
            tb ? b[static_cast<size_t>(l) * ldb + j] : b[static_cast<size_t>(j) * ldb + l];
        acc += x * y;
      }
      const double want = alpha * acc + beta * c0[static_cast<size_t>(j) * m + i];
      max_err = fmax(max_err, fabs(got[static_cast<size_t>(j) * m + i] - want) / (1 + fabs(want)));
    }
  }
  return max_err;
}

template <typename T>
void gemms(cublasHandle_t h, double tolerance) {
  const char* p = sizeof(T) == 4 ? "S" : "D";
  const int m = 67, n = 53, k = 41;
  const T alpha = static_cast<T>(1.25), beta = static_cast<T>(-0.5);
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = ta ? k : m, ldb = tb ? n : k;
      auto a = filled<T>(static_cast<size_t>(lda) * (ta ? m : k), 0.013, 0.25);
      auto b = filled<T>(static_cast<size_t>(ldb) * (tb ? k : n), 0.007, -0.125);
      auto c = filled<T>(static_cast<size_t>(m) * n, 0.029, 0.0);
      T *da = upload(a), *db = upload(b), *dc = upload(c);
      BLAS_CHECK(gemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                      &alpha, da, lda, db, ldb, &beta, dc, m));
      std::vector<T> got(c.size());
      CHECK(cudaMemcpy(got.data(), dc, sizeof(T) * got.size(), cudaMemcpyDeviceToHost));
      const double err = check(a, b, c, got, ta, tb, m, n, k, alpha, beta);
      EXPECT(err <= tolerance, "%sgemm %c%c %dx%dx%d: error %.3g > %.0e", p, ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k, err, tolerance);
      printf("cublas_gemm: %sgemm %c%c %dx%dx%d: relative error %.2e\n", p, ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k, err);
      for (T* d : {da, db, dc}) CHECK(cudaFree(d));
    }
  }
  // A strided batch of three products.
  const int batch = 3, bm = 32, bn = 24, bk = 16;
  auto a = filled<T>(static_cast<size_t>(bm) * bk * batch, 0.011, 0.5);
  auto b = filled<T>(static_cast<size_t>(bk) * bn * batch, 0.017, -0.25);
  auto c = filled<T>(static_cast<size_t>(bm) * bn * batch, 0.023, 0.0);
  T *da = upload(a), *db = upload(b), *dc = upload(c);
  BLAS_CHECK(gemm_batched(h, bm, bn, bk, &alpha, da, db, &beta, dc, batch));
  std::vector<T> got(c.size());
  CHECK(cudaMemcpy(got.data(), dc, sizeof(T) * got.size(), cudaMemcpyDeviceToHost));
  for (int i = 0; i < batch; ++i) {
    auto part = [&](const std::vector<T>& v, size_t each) {
      return std::vector<T>(v.begin() + each * i, v.begin() + each * (i + 1));
    };
    const double err = check(part(a, bm * bk), part(b, bk * bn), part(c, bm * bn),
                             part(got, bm * bn), false, false, bm, bn, bk, alpha, beta);
    EXPECT(err <= tolerance, "%sgemmStridedBatched [%d]: error %.3g", p, i, err);
  }
  for (T* d : {da, db, dc}) CHECK(cudaFree(d));
  printf("cublas_gemm: %sgemmStridedBatched x%d: agrees with the host\n", p, batch);
}

float to_float(__half v) { return __half2float(v); }
float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
T from_float(float f);
template <>
__half from_float<__half>(float f) {
  return __float2half(f);
}
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float f) {
  return __float2bfloat16(f);
}

// C (f32) = A B with 16-bit A and B: the products are exact in f32, so the result differs
// from a double-precision sum of the same 16-bit values only by f32 rounding.
template <typename T>
void gemm_ex(cublasHandle_t h, cudaDataType type, const char* name) {
  const int m = 128, n = 72, k = 96;
  std::vector<T> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n);
  std::vector<float> af(a.size()), bf(b.size()), c(static_cast<size_t>(m) * n, 0.0f);
  for (size_t i = 0; i < a.size(); ++i) af[i] = to_float(a[i] = from_float<T>(sinf(0.01f * i)));
  for (size_t i = 0; i < b.size(); ++i) bf[i] = to_float(b[i] = from_float<T>(cosf(0.013f * i)));
  T *da = upload(a), *db = upload(b);
  float* dc = upload(c);
  const float alpha = 1.0f, beta = 0.0f;
  BLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, type, m, db, type, k,
                          &beta, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  std::vector<float> got(c.size());
  CHECK(cudaMemcpy(got.data(), dc, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
  const double err = check(af, bf, c, got, false, false, m, n, k, 1.0, 0.0);
  EXPECT(err <= 1e-5, "%s GEMM %dx%dx%d: error %.3g", name, m, n, k, err);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  printf("cublas_gemm: %s GEMM %dx%dx%d: relative error %.2e\n", name, m, n, k, err);
}

// SGEMM with TF32 tensor ops: inputs keep 10 mantissa bits, so the error is that of TF32.
void sgemm_tf32(cublasHandle_t h) {
  BLAS_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
  const int m = 128, n = 96, k = 64;
  auto a = filled<float>(static_cast<size_t>(m) * k, 0.01, 0.0);
  auto b = filled<float>(static_cast<size_t>(k) * n, 0.013, 0.0);
  std::vector<float> c(static_cast<size_t>(m) * n, 0.0f);
  float *da = upload(a), *db = upload(b), *dc = upload(c);
  const float alpha = 1.0f, beta = 0.0f;
  BLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m, db, k, &beta, dc, m));
  std::vector<float> got(c.size());
  CHECK(cudaMemcpy(got.data(), dc, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
  const double err = check(a, b, c, got, false, false, m, n, k, 1.0, 0.0);
  // TF32 keeps 11 significant bits: a relative error near 2^-11 per input, well under 1e-2 here,
  // and a wrong fragment layout would be off by the size of the values. Above f32's 1e-5: the
  // TF32 tensor-op kernel ran, not an f32 one.
  EXPECT(err <= 1e-2 && err > 1e-5, "SGEMM TF32 %dx%dx%d: error %.3g", m, n, k, err);
  BLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  for (float* d : {da, db, dc}) CHECK(cudaFree(d));
  printf("cublas_gemm: SGEMM TF32 %dx%dx%d: relative error %.2e\n", m, n, k, err);
}

int main() {
  cublasHandle_t h;
  BLAS_CHECK(cublasCreate(&h));
  gemms<float>(h, 1e-5);
  gemms<double>(h, 1e-13);
  gemm_ex<__half>(h, CUDA_R_16F, "half");
  gemm_ex<__nv_bfloat16>(h, CUDA_R_16BF, "bfloat16");
  sgemm_tf32(h);
  BLAS_CHECK(cublasDestroy(h));
  printf("cublas_gemm: all checks passed\n");
  return 0;
}
