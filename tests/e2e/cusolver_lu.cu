// cuSOLVER LU and Cholesky on the simulated GPU (gpu-server --sim-profile sm_121: cuSOLVER 13
// carries PTX for compute_121 only): getrf factors a general matrix with partial pivoting and
// getrs solves with several right-hand sides, in double and single precision; potrf and potrs
// do the same for a symmetric positive definite matrix. Checked on the host: the pivots are
// valid row numbers, info is 0, and the solutions' residuals |AX - B| are small.
#include <cusolverDn.h>
#include <math.h>

#include <vector>

#include "tests/e2e/check.h"

#define SOLVER_CHECK(x)                                                                  \
  do {                                                                                   \
    cusolverStatus_t s_ = (x);                                                           \
    EXPECT(s_ == CUSOLVER_STATUS_SUCCESS, "%s returned cusolverStatus %d", #x, (int)s_); \
  } while (0)

cusolverStatus_t getrf_buffer(cusolverDnHandle_t h, int n, double* a, int* lwork) {
  return cusolverDnDgetrf_bufferSize(h, n, n, a, n, lwork);
}
cusolverStatus_t getrf_buffer(cusolverDnHandle_t h, int n, float* a, int* lwork) {
  return cusolverDnSgetrf_bufferSize(h, n, n, a, n, lwork);
}
cusolverStatus_t getrf(cusolverDnHandle_t h, int n, double* a, double* w, int* piv, int* info) {
  return cusolverDnDgetrf(h, n, n, a, n, w, piv, info);
}
cusolverStatus_t getrf(cusolverDnHandle_t h, int n, float* a, float* w, int* piv, int* info) {
  return cusolverDnSgetrf(h, n, n, a, n, w, piv, info);
}
cusolverStatus_t getrs(cusolverDnHandle_t h, int n, int nrhs, double* a, int* piv, double* b,
                       int* info) {
  return cusolverDnDgetrs(h, CUBLAS_OP_N, n, nrhs, a, n, piv, b, n, info);
}
cusolverStatus_t getrs(cusolverDnHandle_t h, int n, int nrhs, float* a, int* piv, float* b,
                       int* info) {
  return cusolverDnSgetrs(h, CUBLAS_OP_N, n, nrhs, a, n, piv, b, n, info);
}

template <typename T>
void solve(cusolverDnHandle_t h, int n, int nrhs, double tolerance) {
  // Column-major; small diagonal so that partial pivoting must swap rows.
  std::vector<T> a(static_cast<size_t>(n) * n), b(static_cast<size_t>(n) * nrhs);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i)
      a[static_cast<size_t>(j) * n + i] =
          static_cast<T>(sin(0.31 * i + 0.77 * j) + (i == (j + 1) % n ? 2.0 : 0.0));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(cos(0.23 * i));
  T *d_a, *d_b, *d_work;
  int *d_piv, *d_info;
  CHECK(cudaMalloc(&d_a, sizeof(T) * a.size()));
  CHECK(cudaMalloc(&d_b, sizeof(T) * b.size()));
  CHECK(cudaMalloc(&d_piv, sizeof(int) * n));
  CHECK(cudaMalloc(&d_info, sizeof(int)));
  CHECK(cudaMemcpy(d_a, a.data(), sizeof(T) * a.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_b, b.data(), sizeof(T) * b.size(), cudaMemcpyHostToDevice));
  int lwork = 0;
  SOLVER_CHECK(getrf_buffer(h, n, d_a, &lwork));
  CHECK(cudaMalloc(&d_work, sizeof(T) * (lwork > 0 ? lwork : 1)));
  SOLVER_CHECK(getrf(h, n, d_a, d_work, d_piv, d_info));
  int info = -1;
  CHECK(cudaMemcpy(&info, d_info, sizeof info, cudaMemcpyDeviceToHost));
  EXPECT(info == 0, "getrf n=%d: info %d", n, info);
  std::vector<int> piv(n);
  CHECK(cudaMemcpy(piv.data(), d_piv, sizeof(int) * n, cudaMemcpyDeviceToHost));
  int swaps = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT(piv[i] >= i + 1 && piv[i] <= n, "getrf n=%d: pivot %d is %d", n, i, piv[i]);
    swaps += piv[i] != i + 1;
  }
  EXPECT(swaps > 0, "getrf n=%d: no row was swapped, the test matrix needs pivoting", n);
  SOLVER_CHECK(getrs(h, n, nrhs, d_a, d_piv, d_b, d_info));
  CHECK(cudaMemcpy(&info, d_info, sizeof info, cudaMemcpyDeviceToHost));
  EXPECT(info == 0, "getrs n=%d: info %d", n, info);
  std::vector<T> x(b.size());
  CHECK(cudaMemcpy(x.data(), d_b, sizeof(T) * x.size(), cudaMemcpyDeviceToHost));
  double max_resid = 0;
  for (int r = 0; r < nrhs; ++r) {
    for (int i = 0; i < n; ++i) {
      double ax = 0;
      for (int j = 0; j < n; ++j)
        ax += static_cast<double>(a[static_cast<size_t>(j) * n + i]) *
              x[static_cast<size_t>(r) * n + j];
      max_resid = fmax(max_resid, fabs(ax - b[static_cast<size_t>(r) * n + i]));
    }
  }
  EXPECT(max_resid <= tolerance, "getrs n=%d nrhs=%d: residual %.3g > %.0e", n, nrhs, max_resid,
         tolerance);
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_work));
  CHECK(cudaFree(d_piv));
  CHECK(cudaFree(d_info));
  printf("cusolver_lu: %s n=%d nrhs=%d: %d row swaps, residual %.2e\n", sizeof(T) == 8 ? "D" : "S",
         n, nrhs, swaps, max_resid);
}

// Cholesky in double precision: A = L L^T for a diagonally dominant symmetric A, then solve.
void cholesky(cusolverDnHandle_t h, int n, double tolerance) {
  std::vector<double> a(static_cast<size_t>(n) * n), b(n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i)
      a[static_cast<size_t>(j) * n + i] = (i == j ? 2.0 * n : 0.0) + cos(0.1 * (i + j));
  for (int i = 0; i < n; ++i) b[i] = sin(0.2 * i);
  double *d_a, *d_b, *d_work;
  int* d_info;
  CHECK(cudaMalloc(&d_a, sizeof(double) * a.size()));
  CHECK(cudaMalloc(&d_b, sizeof(double) * n));
  CHECK(cudaMalloc(&d_info, sizeof(int)));
  CHECK(cudaMemcpy(d_a, a.data(), sizeof(double) * a.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_b, b.data(), sizeof(double) * n, cudaMemcpyHostToDevice));
  int lwork = 0;
  SOLVER_CHECK(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, d_a, n, &lwork));
  CHECK(cudaMalloc(&d_work, sizeof(double) * (lwork > 0 ? lwork : 1)));
  SOLVER_CHECK(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, d_a, n, d_work, lwork, d_info));
  int info = -1;
  CHECK(cudaMemcpy(&info, d_info, sizeof info, cudaMemcpyDeviceToHost));
  EXPECT(info == 0, "potrf n=%d: info %d", n, info);
  SOLVER_CHECK(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, 1, d_a, n, d_b, n, d_info));
  std::vector<double> x(n);
  CHECK(cudaMemcpy(x.data(), d_b, sizeof(double) * n, cudaMemcpyDeviceToHost));
  double resid = 0;
  for (int i = 0; i < n; ++i) {
    double ax = 0;
    for (int j = 0; j < n; ++j) ax += a[static_cast<size_t>(j) * n + i] * x[j];
    resid = fmax(resid, fabs(ax - b[i]));
  }
  EXPECT(resid <= tolerance, "potrs n=%d: residual %.3g > %.0e", n, resid, tolerance);
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_work));
  CHECK(cudaFree(d_info));
  printf("cusolver_lu: Cholesky n=%d: residual %.2e\n", n, resid);
}

int main() {
  cusolverDnHandle_t h;
  SOLVER_CHECK(cusolverDnCreate(&h));
  solve<double>(h, 32, 1, 1e-11);
  solve<double>(h, 96, 3, 1e-10);
  solve<float>(h, 24, 2, 1e-3);
  cholesky(h, 80, 1e-11);
  SOLVER_CHECK(cusolverDnDestroy(h));
  printf("cusolver_lu: all checks passed\n");
  return 0;
}
