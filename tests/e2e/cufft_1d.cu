// cuFFT on the simulated GPU: 1D complex-to-complex transforms in single and double precision,
// forward against a direct DFT computed on the host, and forward then inverse back to the
// input (scaled by n). Sizes cover a power of two, a mixed radix, a prime and a batch. cuFFT
// loads its kernels as one-function modules and takes their handles through a driver export
// table (client-lib/core/export_tables.cc, FUNCTION_INFO); its PTX targets compute_75 to 90.
#include <cufft.h>
#include <math.h>
#include <stdint.h>

#include <vector>

#include "tests/e2e/check.h"

#define FFT_CHECK(x)                                                        \
  do {                                                                      \
    cufftResult r_ = (x);                                                   \
    EXPECT(r_ == CUFFT_SUCCESS, "%s returned cufftResult %d", #x, (int)r_); \
  } while (0)

template <typename C>
struct Traits;
template <>
struct Traits<cufftComplex> {
  static constexpr cufftType kType = CUFFT_C2C;
  static constexpr double kTolerance = 2e-5;  // relative to the largest output magnitude
  static const char* name() { return "C2C"; }
  static cufftResult exec(cufftHandle p, cufftComplex* in, cufftComplex* out, int dir) {
    return cufftExecC2C(p, in, out, dir);
  }
};
template <>
struct Traits<cufftDoubleComplex> {
  static constexpr cufftType kType = CUFFT_Z2Z;
  static constexpr double kTolerance = 1e-12;
  static const char* name() { return "Z2Z"; }
  static cufftResult exec(cufftHandle p, cufftDoubleComplex* in, cufftDoubleComplex* out, int dir) {
    return cufftExecZ2Z(p, in, out, dir);
  }
};

template <typename C>
void transform(int n, int batch) {
  using T = Traits<C>;
  const size_t count = static_cast<size_t>(n) * batch;
  std::vector<C> in(count);
  for (size_t i = 0; i < count; ++i) {
    in[i].x = sin(0.37 * i) + 0.25 * (i % 5);
    in[i].y = cos(0.11 * i) - 0.125 * (i % 3);
  }
  C *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, sizeof(C) * count));
  CHECK(cudaMalloc(&d_out, sizeof(C) * count));
  CHECK(cudaMemcpy(d_in, in.data(), sizeof(C) * count, cudaMemcpyHostToDevice));
  cufftHandle plan;
  FFT_CHECK(cufftPlan1d(&plan, n, T::kType, batch));
  FFT_CHECK(T::exec(plan, d_in, d_out, CUFFT_FORWARD));
  std::vector<C> out(count);
  CHECK(cudaMemcpy(out.data(), d_out, sizeof(C) * count, cudaMemcpyDeviceToHost));

  // Direct DFT in long double: X[k] = sum_j x[j] e^{-2 pi i jk/n}.
  double max_err = 0, max_mag = 0;
  for (int b = 0; b < batch; ++b) {
    const C* x = in.data() + static_cast<size_t>(b) * n;
    for (int k = 0; k < n; ++k) {
      long double re = 0, im = 0;
      for (int j = 0; j < n; ++j) {
        const long double a = -2.0L * M_PI * ((static_cast<long long>(j) * k) % n) / n;
        re += x[j].x * cosl(a) - x[j].y * sinl(a);
        im += x[j].x * sinl(a) + x[j].y * cosl(a);
      }
      const C& got = out[static_cast<size_t>(b) * n + k];
      max_err = fmax(max_err, fabs(static_cast<double>(re) - got.x));
      max_err = fmax(max_err, fabs(static_cast<double>(im) - got.y));
      max_mag = fmax(max_mag, fabs(static_cast<double>(re)) + fabs(static_cast<double>(im)));
    }
  }
  const double rel = max_err / max_mag;
  EXPECT(rel <= T::kTolerance, "%s n=%d batch=%d forward: max error %.3g of %.3g (%.3g > %.0e)",
         T::name(), n, batch, max_err, max_mag, rel, T::kTolerance);

  // Inverse of the forward result, in place: n times the input.
  FFT_CHECK(T::exec(plan, d_out, d_out, CUFFT_INVERSE));
  CHECK(cudaMemcpy(out.data(), d_out, sizeof(C) * count, cudaMemcpyDeviceToHost));
  double back_err = 0, in_mag = 0;
  for (size_t i = 0; i < count; ++i) {
    back_err = fmax(back_err, fabs(out[i].x / n - in[i].x) + fabs(out[i].y / n - in[i].y));
    in_mag = fmax(in_mag, fabs(in[i].x) + fabs(in[i].y));
  }
  EXPECT(back_err / in_mag <= T::kTolerance, "%s n=%d batch=%d inverse: max error %.3g", T::name(),
         n, batch, back_err);
  FFT_CHECK(cufftDestroy(plan));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  printf("cufft_1d: %s n=%d batch=%d: forward error %.2e, round trip error %.2e\n", T::name(), n,
         batch, rel, back_err / in_mag);
}

int main() {
  transform<cufftComplex>(256, 1);
  transform<cufftComplex>(1000, 1);  // 2^3 * 5^3
  transform<cufftComplex>(97, 1);    // prime
  transform<cufftComplex>(64, 3);
  transform<cufftDoubleComplex>(512, 1);
  transform<cufftDoubleComplex>(360, 2);  // 2^3 * 3^2 * 5
  printf("cufft_1d: all checks passed\n");
  return 0;
}
