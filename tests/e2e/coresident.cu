// Blocks that are resident together advance together, as on a GPU: an ordinary launch whose
// blocks wait for each other (a software grid barrier over a grid sized by the occupancy API,
// a chain where each block waits for the one after it, persistent blocks taking work from a
// queue), warps of one block waiting for each other without a barrier, waiting loops that back
// off with __nanosleep, and warps leaving a barrier together reading a shared value before the
// first of them overwrites it (racy CUDA that GPUs run this way in practice).
#include "tests/e2e/check.h"

// Every block arrives, then waits until all have: only correct if all are resident.
__global__ void grid_barrier(unsigned* arrived, int* values, int* out, int phases) {
  const unsigned n = gridDim.x;
  for (int p = 0; p < phases; ++p) {
    if (threadIdx.x == 0) values[blockIdx.x] = p * 1000 + static_cast<int>(blockIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(arrived, 1u);
      while (atomicAdd(arrived, 0u) < n * (p + 1)) {
      }
      __threadfence();
    }
    __syncthreads();
    // Every block's value of this phase is there: read the next block's.
    if (threadIdx.x == 0) {
      const unsigned next = (blockIdx.x + 1) % n;
      out[p * n + blockIdx.x] = *static_cast<volatile int*>(&values[next]);
    }
    __syncthreads();
    // Nobody writes the next phase's value before everyone has read this one's.
    if (threadIdx.x == 0) {
      atomicAdd(arrived + 1, 1u);
      while (atomicAdd(arrived + 1, 0u) < n * (p + 1)) {
      }
    }
    __syncthreads();
  }
}

// Block b waits for block b+1's flag: the last block, started last, must run for the first
// to finish.
__global__ void reverse_chain(volatile int* flags, int* order) {
  const int b = static_cast<int>(blockIdx.x);
  if (threadIdx.x == 0) {
    int mine = 1;
    if (b + 1 < static_cast<int>(gridDim.x)) {
      while (flags[b + 1] == 0) {
        __nanosleep(64);
      }
      mine = flags[b + 1] + 1;
    }
    order[b] = mine;
    __threadfence();
    flags[b] = mine;
  }
}

// Persistent blocks: a queue of items, one ticket counter; the last block to finish an item
// publishes the total, which every block then waits to read.
__global__ void persistent(unsigned* ticket, unsigned* done, int items, unsigned long long* sum,
                           volatile unsigned long long* published, unsigned long long* seen) {
  __shared__ unsigned item;
  for (;;) {
    if (threadIdx.x == 0) item = atomicAdd(ticket, 1u);
    __syncthreads();
    if (item >= static_cast<unsigned>(items)) break;
    if (threadIdx.x == 0) {
      atomicAdd(sum, static_cast<unsigned long long>(item) + 1);
      __threadfence();
      if (atomicAdd(done, 1u) + 1 == static_cast<unsigned>(items)) *published = *sum;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    while (*published == 0) {
    }
    seen[blockIdx.x] = *published;
  }
}

// Warp 0 waits for a value the last warp of the block writes, with no barrier between them.
__global__ void warps_wait(int* out) {
  __shared__ volatile int flag;
  __shared__ volatile int value;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  const int last_warp = static_cast<int>(blockDim.x / 32) - 1;
  if (threadIdx.x / 32 == 0) {
    if (threadIdx.x == 0) {
      while (flag == 0) {
      }
      out[blockIdx.x] = value;
    }
  } else if (static_cast<int>(threadIdx.x / 32) == last_warp && threadIdx.x % 32 == 0) {
    value = 7 + static_cast<int>(blockIdx.x);
    flag = 1;
  }
}

// Racy: thread 0 overwrites `s` for the next round with no barrier after the others read it.
// Every warp leaves the barrier together on a GPU and reads `s` before thread 0 gets round to
// its next write.
__global__ void read_after_barrier(int* out, int rounds) {
  __shared__ int s;
  int acc = 0;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) s = (r + 1) * 10;
    __syncthreads();
    acc += s;
  }
  out[threadIdx.x] = acc;
}

int main() {
  int dev = 0, sms = 0, per_sm = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

  // A grid of exactly what fits at once, from the occupancy API.
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_barrier, 128, 0));
  EXPECT(per_sm > 0, "occupancy %d", per_sm);
  const int n = per_sm * sms;
  const int phases = 3;
  unsigned* arrived = nullptr;
  int *values = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&arrived, 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&values, n * sizeof(int)));
  CHECK(cudaMalloc(&out, phases * n * sizeof(int)));
  CHECK(cudaMemset(arrived, 0, 2 * sizeof(unsigned)));
  grid_barrier<<<n, 128>>>(arrived, values, out, phases);
  CHECK(cudaGetLastError());
  std::vector<int> h(phases * n);
  CHECK(cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int p = 0; p < phases; ++p)
    for (int b = 0; b < n; ++b)
      EXPECT(h[p * n + b] == p * 1000 + (b + 1) % n, "grid barrier: phase %d block %d read %d", p,
             b, h[p * n + b]);

  // 64 blocks, each waiting for the next.
  const int chain = 64;
  int *flags = nullptr, *order = nullptr;
  CHECK(cudaMalloc(&flags, chain * sizeof(int)));
  CHECK(cudaMalloc(&order, chain * sizeof(int)));
  CHECK(cudaMemset(flags, 0, chain * sizeof(int)));
  reverse_chain<<<chain, 32>>>(flags, order);
  CHECK(cudaGetLastError());
  int ho[chain];
  CHECK(cudaMemcpy(ho, order, sizeof ho, cudaMemcpyDeviceToHost));
  for (int b = 0; b < chain; ++b)
    EXPECT(ho[b] == chain - b, "reverse chain: block %d got %d", b, ho[b]);

  // Persistent blocks, as many as fit, over 1000 items.
  int persistent_per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&persistent_per_sm, persistent, 64, 0));
  const int workers = persistent_per_sm * sms;
  const int items = 1000;
  unsigned* counters = nullptr;
  unsigned long long* sums = nullptr;
  CHECK(cudaMalloc(&counters, 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&sums, (2 + workers) * sizeof(unsigned long long)));
  CHECK(cudaMemset(counters, 0, 2 * sizeof(unsigned)));
  CHECK(cudaMemset(sums, 0, (2 + workers) * sizeof(unsigned long long)));
  persistent<<<workers, 64>>>(counters, counters + 1, items, sums, sums + 1, sums + 2);
  CHECK(cudaGetLastError());
  std::vector<unsigned long long> hs(2 + workers);
  CHECK(
      cudaMemcpy(hs.data(), sums, hs.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  const unsigned long long expected = 1000ull * 1001 / 2;
  EXPECT(hs[0] == expected, "persistent: sum %llu", hs[0]);
  for (int b = 0; b < workers; ++b)
    EXPECT(hs[2 + b] == expected, "persistent: block %d saw %llu", b, hs[2 + b]);

  // Warps of a block wait for each other.
  int* wout = nullptr;
  CHECK(cudaMalloc(&wout, 8 * sizeof(int)));
  warps_wait<<<8, 256>>>(wout);
  CHECK(cudaGetLastError());
  int hw[8];
  CHECK(cudaMemcpy(hw, wout, sizeof hw, cudaMemcpyDeviceToHost));
  for (int b = 0; b < 8; ++b) EXPECT(hw[b] == 7 + b, "warps: block %d got %d", b, hw[b]);

  // Warps leaving a barrier read before thread 0 writes again.
  int* rout = nullptr;
  CHECK(cudaMalloc(&rout, 256 * sizeof(int)));
  read_after_barrier<<<1, 256>>>(rout, 4);
  CHECK(cudaGetLastError());
  int hr[256];
  CHECK(cudaMemcpy(hr, rout, sizeof hr, cudaMemcpyDeviceToHost));
  for (int t = 0; t < 256; ++t)
    EXPECT(hr[t] == 100, "read after barrier: thread %d summed %d", t, hr[t]);

  CHECK(cudaFree(arrived));
  CHECK(cudaFree(values));
  CHECK(cudaFree(out));
  CHECK(cudaFree(flags));
  CHECK(cudaFree(order));
  CHECK(cudaFree(counters));
  CHECK(cudaFree(sums));
  CHECK(cudaFree(wout));
  CHECK(cudaFree(rout));
  printf("coresident: all checks passed\n");
  return 0;
}
