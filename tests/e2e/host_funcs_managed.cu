// Host functions and memory the host and the device share (client-lib/calls/host_calls.cc,
// server/calls/host_calls.h): a host function sees what the kernels before it on its stream wrote
// to managed memory, to mapped pinned memory, to registered memory and to a __managed__ variable,
// with no synchronisation in between; the kernels after it see what it wrote; the enqueuing
// thread never waits.
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/e2e/check.h"

namespace {

constexpr int kN = 3000;  // more than one page of ints

__managed__ int counter;

__global__ void fill(int* p, int n, int mul) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i * mul;
}
__global__ void twice(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 2;
}
__global__ void bump() { counter += 5; }

struct Seen {
  int* p = nullptr;
  int n = 0;
  int mul = 0;     // what the kernel before wrote: p[i] == i * mul
  int wrong = -1;  // first index that did not match; -1: none
  int calls = 0;
};

// Checks what the kernel before it wrote, then adds one to every element.
void CUDART_CB check_then_add(void* arg) {
  auto* s = static_cast<Seen*>(arg);
  ++s->calls;
  for (int i = 0; i < s->n; ++i) {
    if (s->p[i] != i * s->mul && s->wrong < 0) s->wrong = i;
    s->p[i] += 1;
  }
}

std::atomic<int> counter_seen{-1};
void CUDART_CB read_counter(void*) {
  counter_seen = counter;
  counter = 100;  // the kernel after it adds to this
}

void CUDART_CB stream_callback(cudaStream_t, cudaError_t status, void* arg) {
  if (status == cudaSuccess) check_then_add(arg);
}

// kernel writes i*3 -> host function checks it and adds 1 -> kernel doubles -> the host reads.
void round_trip(const char* what, int* host_view, int* device_view, cudaStream_t s, bool callback) {
  Seen seen{host_view, kN, 3};
  fill<<<(kN + 255) / 256, 256, 0, s>>>(device_view, kN, 3);
  if (callback) {
    CHECK(cudaStreamAddCallback(s, stream_callback, &seen, 0));
  } else {
    CHECK(cudaLaunchHostFunc(s, check_then_add, &seen));
  }
  twice<<<(kN + 255) / 256, 256, 0, s>>>(device_view, kN);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(s));
  EXPECT(seen.calls == 1, "%s: the host function ran %d times", what, seen.calls);
  EXPECT(seen.wrong < 0,
         "%s: the host function saw element %d = %d, not what the kernel "
         "before it wrote (%d)",
         what, seen.wrong, seen.wrong < 0 ? 0 : host_view[seen.wrong],
         seen.wrong < 0 ? 0 : seen.wrong * 3);
  for (int i = 0; i < kN; ++i) {
    EXPECT(host_view[i] == 2 * (3 * i + 1),
           "%s: element %d = %d after the stream, want %d "
           "(the kernel after the host function did not see "
           "its write?)",
           what, i, host_view[i], 2 * (3 * i + 1));
  }
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // 1. Managed memory, by cudaLaunchHostFunc and by cudaStreamAddCallback.
  int* m = nullptr;
  CHECK(cudaMallocManaged(&m, kN * sizeof(int)));
  round_trip("managed", m, m, s, false);
  round_trip("managed, callback", m, m, s, true);

  // 2. Mapped pinned memory that kernels use directly.
  int* pinned = nullptr;
  CHECK(cudaHostAlloc(&pinned, kN * sizeof(int), cudaHostAllocMapped));
  int* pinned_dev = nullptr;
  CHECK(cudaHostGetDevicePointer(&pinned_dev, pinned, 0));
  round_trip("pinned", pinned, pinned_dev, s, false);

  // 3. Registered memory that kernels use through its device pointer.
  static int registered[kN + 1024] __attribute__((aligned(4096)));
  CHECK(cudaHostRegister(registered, kN * sizeof(int), cudaHostRegisterMapped));
  int* registered_dev = nullptr;
  CHECK(cudaHostGetDevicePointer(&registered_dev, registered, 0));
  round_trip("registered", registered, registered_dev, s, false);

  // 4. A __managed__ variable: a kernel adds 5, the function reads it and sets 100, a kernel
  // adds 5 again.
  counter = 1;
  bump<<<1, 1, 0, s>>>();
  CHECK(cudaLaunchHostFunc(s, read_counter, nullptr));
  bump<<<1, 1, 0, s>>>();
  CHECK(cudaStreamSynchronize(s));
  EXPECT(counter_seen.load() == 6, "the host function saw the __managed__ variable as %d, want 6",
         counter_seen.load());
  EXPECT(counter == 105, "the __managed__ variable is %d after the stream, want 105", counter);

  // 5. The enqueuing thread does not wait for the function: a function that holds the stream
  // for a while leaves the host free to go on.
  static std::atomic<int> release{0};
  Seen held{m, kN, 6};
  fill<<<(kN + 255) / 256, 256, 0, s>>>(m, kN, 6);
  CHECK(cudaLaunchHostFunc(
      s,
      [](void*) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!release.load() && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      },
      nullptr));
  CHECK(cudaLaunchHostFunc(s, check_then_add, &held));
  EXPECT(cudaStreamQuery(s) == cudaErrorNotReady, "the stream ran past a held host function");
  release = 1;
  CHECK(cudaStreamSynchronize(s));
  EXPECT(held.calls == 1 && held.wrong < 0, "held: %d calls, first wrong element %d", held.calls,
         held.wrong);
  EXPECT(m[7] == 43, "element 7 = %d after the held stream, want 43", m[7]);

  CHECK(cudaHostUnregister(registered));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(m));
  CHECK(cudaStreamDestroy(s));
  printf("host_funcs_managed: all checks passed\n");
  return 0;
}
