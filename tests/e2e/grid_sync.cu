// Grid-wide synchronisation: a cooperative launch (cudaLaunchCooperativeKernel) whose blocks
// meet at cooperative groups' grid.sync() between phases, so each phase reads what every block
// wrote in the one before; the grid is as large as the occupancy API says may be resident.
// Also `bmsk`, which cub's sorts use.
#include <cooperative_groups.h>

#include "tests/e2e/check.h"

namespace cg = cooperative_groups;

// Phase 1: each block sums its slice into partial[block]. Phase 2: every block reads all
// partials and writes the total, scaled by its index. Phase 3: block 0 checks every block saw
// the same total. Repeated `rounds` times, so the barrier is reused.
__global__ void phases(const int* in, int n, long long* partial, long long* totals, int* errors,
                       int rounds) {
  cg::grid_group grid = cg::this_grid();
  __shared__ long long acc;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) acc = 0;
    __syncthreads();
    long long mine = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      mine += in[i] + r;
    atomicAdd(reinterpret_cast<unsigned long long*>(&acc), static_cast<unsigned long long>(mine));
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    grid.sync();
    if (threadIdx.x == 0) {
      long long total = 0;
      for (int b = 0; b < gridDim.x; ++b) total += partial[b];
      totals[blockIdx.x] = total;
    }
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      for (int b = 1; b < gridDim.x; ++b)
        if (totals[b] != totals[0]) atomicAdd(errors, 1);
    }
    grid.sync();
  }
}

__global__ void masks(unsigned* out) {
  unsigned i = threadIdx.x;
  unsigned pos = i % 40, width = (i / 40) * 7 % 40;
  unsigned clamp, wrap;
  asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(clamp) : "r"(pos), "r"(width));
  asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(wrap) : "r"(pos), "r"(width));
  out[2 * i] = clamp;
  out[2 * i + 1] = wrap;
}

static unsigned host_bmsk(unsigned pos, unsigned width, bool wrap) {
  if (wrap) {
    pos &= 31;
    width &= 31;
  } else {
    pos = pos > 32 ? 32 : pos;
    width = width > 32 ? 32 : width;
  }
  unsigned long long m = ((1ull << width) - 1) << pos;
  return static_cast<unsigned>(m & 0xffffffffull);
}

int main() {
  int coop = 0, sms = 0, per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  EXPECT(coop == 1, "cooperative launch attribute %d", coop);
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int threads = 128;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, phases, threads, 0));
  EXPECT(per_sm > 0, "occupancy %d", per_sm);
  // Several blocks per SM would be allowed; a few SMs' worth keeps the test quick.
  int blocks = sms < 4 ? sms * per_sm : 4 * per_sm;
  if (blocks > 32) blocks = 32;

  const int n = 10000, rounds = 3;
  int host[n];
  long long want = 0;
  for (int i = 0; i < n; ++i) {
    host[i] = (i * 7) % 13 - 3;
    want += host[i];
  }
  int *in, *errors;
  long long *partial, *totals;
  CHECK(cudaMalloc(&in, sizeof host));
  CHECK(cudaMalloc(&partial, blocks * sizeof(long long)));
  CHECK(cudaMalloc(&totals, blocks * sizeof(long long)));
  CHECK(cudaMalloc(&errors, sizeof(int)));
  CHECK(cudaMemset(errors, 0, sizeof(int)));
  CHECK(cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice));
  int nn = n, rr = rounds;
  void* args[] = {&in, &nn, &partial, &totals, &errors, &rr};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(phases), blocks, threads, args, 0,
                                    nullptr));
  CHECK(cudaDeviceSynchronize());
  int bad = -1;
  CHECK(cudaMemcpy(&bad, errors, sizeof bad, cudaMemcpyDeviceToHost));
  EXPECT(bad == 0, "%d blocks saw another total", bad);
  long long got[64];
  CHECK(cudaMemcpy(got, totals, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
  // The last round adds rounds - 1 to every element.
  const long long last = want + static_cast<long long>(n) * (rounds - 1);
  for (int b = 0; b < blocks; ++b)
    EXPECT(got[b] == last, "block %d total %lld, want %lld", b, got[b], last);

  // A grid larger than can be resident is refused at the launch, and the context stays usable
  // (the error is not the next synchronisation's).
  void* args2[] = {&in, &nn, &partial, &totals, &errors, &rr};
  cudaError_t e = cudaLaunchCooperativeKernel(reinterpret_cast<void*>(phases), sms * per_sm + 1,
                                              threads, args2, 0, nullptr);
  EXPECT(e == cudaErrorCooperativeLaunchTooLarge, "an oversized cooperative grid: %s",
         cudaGetErrorName(e));
  CHECK(cudaDeviceSynchronize());

  unsigned* out;
  const int lanes = 256;
  CHECK(cudaMalloc(&out, 2 * lanes * sizeof(unsigned)));
  masks<<<1, lanes>>>(out);
  CHECK(cudaDeviceSynchronize());
  unsigned m[2 * lanes];
  CHECK(cudaMemcpy(m, out, sizeof m, cudaMemcpyDeviceToHost));
  for (unsigned i = 0; i < lanes; ++i) {
    unsigned pos = i % 40, width = (i / 40) * 7 % 40;
    EXPECT(m[2 * i] == host_bmsk(pos, width, false), "bmsk.clamp %u %u = %#x", pos, width,
           m[2 * i]);
    EXPECT(m[2 * i + 1] == host_bmsk(pos, width, true), "bmsk.wrap %u %u = %#x", pos, width,
           m[2 * i + 1]);
  }
  free_device(in, partial, totals, errors, out);
  printf("grid_sync: all checks passed\n");
  return 0;
}
