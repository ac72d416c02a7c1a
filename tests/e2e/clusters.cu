// Thread-block clusters on a Hopper-class device (--sim-profile sm_90): __cluster_dims__ and
// cudaLaunchKernelEx cluster dimensions, each block's place in its cluster, distributed shared
// memory (a block reading and atomically adding into its cluster peers' shared memory through
// cluster.map_shared_rank), cluster.sync(), and launches whose cluster does not fit refused.
#include <cooperative_groups.h>

#include "tests/e2e/check.h"

namespace cg = cooperative_groups;

// Each block publishes its rank in its shared memory, then reads the next rank's.
__global__ void __cluster_dims__(2, 1, 1) ring(int* out) {
  __shared__ int mine;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) mine = 100 * static_cast<int>(blockIdx.x) + static_cast<int>(rank);
  cluster.sync();
  const unsigned next = (rank + 1) % cluster.num_blocks();
  int* theirs = cluster.map_shared_rank(&mine, next);
  if (threadIdx.x == 0) {
    out[4 * blockIdx.x + 0] = *theirs;
    out[4 * blockIdx.x + 1] = static_cast<int>(rank);
    out[4 * blockIdx.x + 2] = static_cast<int>(cluster.num_blocks());
    out[4 * blockIdx.x + 3] = static_cast<int>(cluster.dim_blocks().x);
  }
  cluster.sync();  // nobody leaves while a peer may still read its shared memory
}

constexpr int kBins = 64;

// A histogram spread over the cluster's shared memory: bin b lives in rank b % n.
__global__ void histogram(const int* values, int count, unsigned* bins) {
  __shared__ unsigned part[kBins];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned n = cluster.num_blocks();
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) part[i] = 0;
  cluster.sync();
  const unsigned blocks = gridDim.x * gridDim.y;
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  for (int i = block * blockDim.x + threadIdx.x; i < count; i += blocks * blockDim.x) {
    const int b = values[i] % kBins;
    unsigned* owner = cluster.map_shared_rank(part, static_cast<unsigned>(b) % n);
    atomicAdd(&owner[b], 1u);
  }
  cluster.sync();
  const unsigned rank = cluster.block_rank();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (static_cast<unsigned>(b) % n == rank) atomicAdd(&bins[b], part[b]);
  cluster.sync();
}

__global__ void plain(int* out) { out[blockIdx.x] = 1; }

int main() {
  int dev = 0, clusters = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, dev));
  EXPECT(clusters == 1, "cluster launch attribute %d", clusters);
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, ring));
  EXPECT(fa.requiredClusterWidth == 2 && fa.requiredClusterHeight == 1, "required cluster %dx%d",
         fa.requiredClusterWidth, fa.requiredClusterHeight);

  int* out = nullptr;
  CHECK(cudaMalloc(&out, 8 * 4 * sizeof(int)));
  ring<<<8, 64>>>(out);
  CHECK(cudaGetLastError());
  int h[32];
  CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  for (int b = 0; b < 8; ++b) {
    const int rank = b % 2, peer = b - rank + (rank + 1) % 2;
    EXPECT(h[4 * b + 1] == rank && h[4 * b + 2] == 2 && h[4 * b + 3] == 2,
           "block %d: rank %d of %d (dim %d)", b, h[4 * b + 1], h[4 * b + 2], h[4 * b + 3]);
    EXPECT(h[4 * b] == 100 * peer + (rank + 1) % 2, "block %d read %d from its peer", b, h[4 * b]);
  }

  // The occupancy of clusters: the sim's SMs hold this many 2-block clusters of `ring`.
  {
    cudaLaunchConfig_t q = {};
    q.gridDim = dim3(8, 1, 1);
    q.blockDim = dim3(64, 1, 1);
    int per_sm = 0, sms = 0, active = 0, potential = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring, 64, 0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaOccupancyMaxActiveClusters(&active, ring, &q));
    EXPECT(active == per_sm * sms / 2, "active clusters %d (%d per SM, %d SMs)", active, per_sm,
           sms);
    CHECK(cudaOccupancyMaxPotentialClusterSize(&potential, ring, &q));
    EXPECT(potential == 8, "potential cluster size %d", potential);
  }

  // 4x2 clusters over an 8x4 grid, given at launch.
  const int count = 100000;
  std::vector<int> values(count);
  std::vector<unsigned> expected(kBins, 0);
  for (int i = 0; i < count; ++i) {
    values[i] = (i * 7919) % 1000;
    ++expected[values[i] % kBins];
  }
  int* d_values = upload(values);
  unsigned* bins = nullptr;
  CHECK(cudaMalloc(&bins, kBins * sizeof(unsigned)));
  CHECK(cudaMemset(bins, 0, kBins * sizeof(unsigned)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(8, 4, 1);
  cfg.blockDim = dim3(128, 1, 1);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 4;
  attr[0].val.clusterDim.y = 2;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, histogram, static_cast<const int*>(d_values), count, bins));
  std::vector<unsigned> got(kBins);
  CHECK(cudaMemcpy(got.data(), bins, kBins * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int b = 0; b < kBins; ++b)
    EXPECT(got[b] == expected[b], "bin %d: %u, expected %u", b, got[b], expected[b]);

  // Clusters that do not tile the grid, or larger than 8 blocks, are refused at launch.
  int* one = nullptr;
  CHECK(cudaMalloc(&one, 64 * sizeof(int)));
  cudaLaunchConfig_t bad = {};
  bad.gridDim = dim3(6, 1, 1);
  bad.blockDim = dim3(32, 1, 1);
  cudaLaunchAttribute battr[1];
  battr[0].id = cudaLaunchAttributeClusterDimension;
  battr[0].val.clusterDim.x = 4;
  battr[0].val.clusterDim.y = 1;
  battr[0].val.clusterDim.z = 1;
  bad.attrs = battr;
  bad.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&bad, plain, one);
  EXPECT(e == cudaErrorInvalidClusterSize, "6 blocks in clusters of 4: %s", cudaGetErrorName(e));
  bad.gridDim = dim3(32, 1, 1);
  battr[0].val.clusterDim.x = 16;
  e = cudaLaunchKernelEx(&bad, plain, one);
  EXPECT(e == cudaErrorInvalidClusterSize, "a cluster of 16: %s", cudaGetErrorName(e));
  e = cudaGetLastError();  // the launch's error, once; not sticky
  EXPECT(e == cudaErrorInvalidClusterSize, "last error: %s", cudaGetErrorName(e));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaFree(out));
  CHECK(cudaFree(d_values));
  CHECK(cudaFree(bins));
  CHECK(cudaFree(one));
  printf("clusters: all checks passed\n");
  return 0;
}
