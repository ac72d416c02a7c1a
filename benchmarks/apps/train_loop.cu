// A training loop as frameworks run one, small enough for the sim: each step copies a batch in
// from pageable memory, runs forward and backward kernels, an optimizer step, and reads the
// loss back (a 4-byte copy the host waits for), as a training script that logs its loss does.
// A linear model y = w . x fitted by SGD to a target w*: the loss must fall, or the program
// fails.
//
//   train_loop [STEPS]   (default 50)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kFeatures = 256;
constexpr int kBatch = 64;

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

// Forward: each sample's prediction (one block per sample), its error against the target.
__global__ void forward(const float* w, const float* x, const float* y, float* err) {
  __shared__ float part[256];
  const int s = blockIdx.x;
  float sum = 0;
  for (int i = threadIdx.x; i < kFeatures; i += blockDim.x) sum += w[i] * x[s * kFeatures + i];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) err[s] = part[0] - y[s];
}

// The mean squared error of the batch.
__global__ void loss(const float* err, float* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    float sum = 0;
    for (int s = 0; s < kBatch; ++s) sum += err[s] * err[s];
    *out = sum / kBatch;
  }
}

// Backward: the gradient of the loss with respect to each weight.
__global__ void backward(const float* x, const float* err, float* grad) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kFeatures) return;
  float g = 0;
  for (int s = 0; s < kBatch; ++s) g += err[s] * x[s * kFeatures + i];
  grad[i] = 2 * g / kBatch;
}

// The optimizer: SGD with momentum.
__global__ void sgd(float* w, const float* grad, float* velocity, float lr) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kFeatures) return;
  velocity[i] = 0.9f * velocity[i] + grad[i];
  w[i] -= lr * velocity[i];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 50;
  if (steps < 2) {
    std::fprintf(stderr, "train_loop: at least 2 steps\n");
    return 2;
  }
  std::vector<float> target(kFeatures);
  unsigned seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
  };
  for (float& t : target) t = rnd();
  float *w, *x, *y, *err, *grad, *velocity, *dloss;
  CHECK(cudaMalloc(&w, kFeatures * sizeof(float)));
  CHECK(cudaMalloc(&x, kBatch * kFeatures * sizeof(float)));
  CHECK(cudaMalloc(&y, kBatch * sizeof(float)));
  CHECK(cudaMalloc(&err, kBatch * sizeof(float)));
  CHECK(cudaMalloc(&grad, kFeatures * sizeof(float)));
  CHECK(cudaMalloc(&velocity, kFeatures * sizeof(float)));
  CHECK(cudaMalloc(&dloss, sizeof(float)));
  CHECK(cudaMemset(w, 0, kFeatures * sizeof(float)));
  CHECK(cudaMemset(velocity, 0, kFeatures * sizeof(float)));
  std::vector<float> batch(kBatch * kFeatures), labels(kBatch);
  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    // A new batch from pageable memory, as a data loader hands it over.
    for (int s = 0; s < kBatch; ++s) {
      float dot = 0;
      for (int i = 0; i < kFeatures; ++i) {
        const float v = rnd();
        batch[s * kFeatures + i] = v;
        dot += v * target[i];
      }
      labels[s] = dot;
    }
    CHECK(cudaMemcpy(x, batch.data(), batch.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, labels.data(), labels.size() * sizeof(float), cudaMemcpyHostToDevice));
    forward<<<kBatch, 256>>>(w, x, y, err);
    loss<<<1, 32>>>(err, dloss);
    backward<<<(kFeatures + 255) / 256, 256>>>(x, err, grad);
    sgd<<<(kFeatures + 255) / 256, 256>>>(w, grad, velocity, 0.05f);
    CHECK(cudaGetLastError());
    // The loss, read back every step (logged, as training scripts do).
    float host_loss = 0;
    CHECK(cudaMemcpy(&host_loss, dloss, sizeof(float), cudaMemcpyDeviceToHost));
    if (!std::isfinite(host_loss)) {
      std::fprintf(stderr, "train_loop: step %d: loss %f\n", step, host_loss);
      return 1;
    }
    if (step == 0) first = host_loss;
    last = host_loss;
  }
  CHECK(cudaDeviceSynchronize());
  for (float* p : {w, x, y, err, grad, velocity, dloss}) CHECK(cudaFree(p));
  std::printf("train_loop: %d steps, loss %.4f -> %.4f\n", steps, first, last);
  if (!(last < first * 0.5f)) {
    std::fprintf(stderr, "train_loop: the loss did not fall\n");
    return 1;
  }
  return 0;
}
