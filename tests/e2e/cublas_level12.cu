// cuBLAS levels 1 and 2 on the simulated GPU (gpu-server --sim-profile sm_120: cuBLAS 13
// carries PTX for compute_120 only): axpy, dot, nrm2, scal and trsv in single and double
// precision, each against a host reference. cuBLAS's GEMMs and most of its gemv kernels are
// SASS-only in CUDA 13 and do not run on the sim; cublas_sgemm.cu checks them on a real GPU.
#include <cublas_v2.h>
#include <math.h>

#include <vector>

#include "tests/e2e/check.h"

#define BLAS_CHECK(x)                                                                \
  do {                                                                               \
    cublasStatus_t s_ = (x);                                                         \
    EXPECT(s_ == CUBLAS_STATUS_SUCCESS, "%s returned cublasStatus %d", #x, (int)s_); \
  } while (0)

// The typed entry points, by overload.
cublasStatus_t axpy(cublasHandle_t h, int n, const float* a, const float* x, float* y) {
  return cublasSaxpy(h, n, a, x, 1, y, 1);
}
cublasStatus_t axpy(cublasHandle_t h, int n, const double* a, const double* x, double* y) {
  return cublasDaxpy(h, n, a, x, 1, y, 1);
}
cublasStatus_t dot(cublasHandle_t h, int n, const float* x, const float* y, float* r) {
  return cublasSdot(h, n, x, 1, y, 1, r);
}
cublasStatus_t dot(cublasHandle_t h, int n, const double* x, const double* y, double* r) {
  return cublasDdot(h, n, x, 1, y, 1, r);
}
cublasStatus_t nrm2(cublasHandle_t h, int n, const float* x, float* r) {
  return cublasSnrm2(h, n, x, 1, r);
}
cublasStatus_t nrm2(cublasHandle_t h, int n, const double* x, double* r) {
  return cublasDnrm2(h, n, x, 1, r);
}
cublasStatus_t scal(cublasHandle_t h, int n, const float* a, float* x) {
  return cublasSscal(h, n, a, x, 1);
}
cublasStatus_t scal(cublasHandle_t h, int n, const double* a, double* x) {
  return cublasDscal(h, n, a, x, 1);
}
cublasStatus_t trsv(cublasHandle_t h, int n, const float* A, float* x) {
  return cublasStrsv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, A, n, x, 1);
}
cublasStatus_t trsv(cublasHandle_t h, int n, const double* A, double* x) {
  return cublasDtrsv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, A, n, x, 1);
}

template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> v(n);
  CHECK(cudaMemcpy(v.data(), d, sizeof(T) * n, cudaMemcpyDeviceToHost));
  return v;
}

template <typename T>
void level12(cublasHandle_t h, double tol) {
  const char* p = sizeof(T) == 4 ? "S" : "D";
  const int n = 3000;
  std::vector<T> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<T>(sin(0.1 * i));
    y[i] = static_cast<T>(cos(0.2 * i));
  }
  T* dx = upload(x);
  T* dy = upload(y);
  const T a = static_cast<T>(2.5);
  BLAS_CHECK(axpy(h, n, &a, dx, dy));
  std::vector<T> got = download(dy, n);
  double err = 0, ref_dot = 0, ref_nrm = 0;
  for (int i = 0; i < n; ++i) {
    const double want = y[i] + 2.5 * x[i];
    err = fmax(err, fabs(got[i] - want));
    ref_dot += x[i] * want;
    ref_nrm += static_cast<double>(x[i]) * x[i];
  }
  EXPECT(err <= tol, "%saxpy: error %.3g", p, err);
  T r = 0;
  BLAS_CHECK(dot(h, n, dx, dy, &r));
  EXPECT(fabs(r - ref_dot) <= tol * fabs(ref_dot), "%sdot: %.17g, want %.17g", p, (double)r,
         ref_dot);
  BLAS_CHECK(nrm2(h, n, dx, &r));
  EXPECT(fabs(r - sqrt(ref_nrm)) <= tol * sqrt(ref_nrm), "%snrm2: %.17g, want %.17g", p, (double)r,
         sqrt(ref_nrm));
  const T s = static_cast<T>(-0.5);
  BLAS_CHECK(scal(h, n, &s, dx));
  got = download(dx, n);
  for (int i = 0; i < n; ++i) EXPECT(got[i] == static_cast<T>(-0.5 * x[i]), "%sscal [%d]", p, i);
  CHECK(cudaMemcpy(dx, x.data(), sizeof(T) * n, cudaMemcpyHostToDevice));

  // trsv: lower triangular L with a strong diagonal; solve L z = b, check L z against b.
  const int t = 50;
  std::vector<T> L(static_cast<size_t>(t) * t, 0), b(t);
  for (int j = 0; j < t; ++j)
    for (int i = j; i < t; ++i)
      L[static_cast<size_t>(j) * t + i] = static_cast<T>(i == j ? 4.0 + j % 3 : sin(0.3 * i + j));
  for (int i = 0; i < t; ++i) b[i] = static_cast<T>(cos(0.5 * i));
  T* dL = upload(L);
  T* db = upload(b);
  BLAS_CHECK(trsv(h, t, dL, db));
  got = download(db, t);
  double terr = 0;
  for (int i = 0; i < t; ++i) {
    double acc = 0;
    for (int j = 0; j <= i; ++j) acc += L[static_cast<size_t>(j) * t + i] * got[j];
    terr = fmax(terr, fabs(acc - b[i]));
  }
  EXPECT(terr <= tol * 10, "%strsv: residual %.3g", p, terr);
  for (T* d : {dx, dy, dL, db}) CHECK(cudaFree(d));
  printf("cublas_level12: %s axpy dot nrm2 scal trsv agree with the host\n", p);
}

int main() {
  cublasHandle_t h;
  BLAS_CHECK(cublasCreate(&h));
  level12<float>(h, 2e-4);
  level12<double>(h, 1e-12);
  BLAS_CHECK(cublasDestroy(h));
  printf("cublas_level12: all checks passed\n");
  return 0;
}
