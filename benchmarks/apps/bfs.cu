// Breadth-first search as Rodinia's bfs runs it: two kernels per level over a graph in CSR form
// (expand the frontier, then mark the next one), and a flag read back after each level to know
// whether to go on, so every level costs the host a round trip. The distances are checked
// against a search on the host.
//
//   bfs [NODES]   (default 4096: a 64 x 64 grid with a random shortcut per node, fixed seed)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <queue>
#include <vector>

namespace {

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

__global__ void expand(int n, const int* offsets, const int* edges, char* frontier, char* next,
                       const char* visited, int* cost) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n || !frontier[v]) return;
  frontier[v] = 0;
  for (int e = offsets[v]; e < offsets[v + 1]; ++e) {
    const int u = edges[e];
    if (!visited[u]) {
      cost[u] = cost[v] + 1;
      next[u] = 1;
    }
  }
}

__global__ void advance(int n, char* frontier, char* next, char* visited, int* go_on) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n || !next[v]) return;
  frontier[v] = 1;
  visited[v] = 1;
  next[v] = 0;
  *go_on = 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  if (n < 4) return 2;
  // A grid of nodes (as a mesh or an image is), each linked to its four neighbours and to one
  // random node within a row of it: the search takes about as many levels as the grid is wide
  // and high, each one a round trip for the host.
  int width = 1;
  while (width * width < n) ++width;
  unsigned seed = 2024;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<int>(seed >> 4);
  };
  std::vector<int> offsets(n + 1), edges;
  for (int v = 0; v < n; ++v) {
    offsets[v] = static_cast<int>(edges.size());
    const int x = v % width;
    if (x + 1 < width && v + 1 < n) edges.push_back(v + 1);
    if (x > 0) edges.push_back(v - 1);
    if (v + width < n) edges.push_back(v + width);
    if (v >= width) edges.push_back(v - width);
    const int near = v + rnd() % (2 * width + 1) - width;
    if (near >= 0 && near < n && near != v) edges.push_back(near);
  }
  offsets[n] = static_cast<int>(edges.size());
  int *d_offsets, *d_edges, *d_cost, *d_go_on;
  char *d_frontier, *d_next, *d_visited;
  CHECK(cudaMalloc(&d_offsets, offsets.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_edges, edges.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_cost, n * sizeof(int)));
  CHECK(cudaMalloc(&d_go_on, sizeof(int)));
  CHECK(cudaMalloc(&d_frontier, n));
  CHECK(cudaMalloc(&d_next, n));
  CHECK(cudaMalloc(&d_visited, n));
  CHECK(
      cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_edges, edges.data(), edges.size() * sizeof(int), cudaMemcpyHostToDevice));
  std::vector<int> cost(n, -1);
  cost[0] = 0;
  std::vector<char> frontier(n, 0), visited(n, 0);
  frontier[0] = visited[0] = 1;
  CHECK(cudaMemcpy(d_cost, cost.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_frontier, frontier.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_visited, visited.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_next, 0, n));
  const int threads = 256, blocks = (n + threads - 1) / threads;
  int levels = 0;
  for (int go_on = 1; go_on; ++levels) {
    go_on = 0;
    CHECK(cudaMemcpy(d_go_on, &go_on, sizeof go_on, cudaMemcpyHostToDevice));
    expand<<<blocks, threads>>>(n, d_offsets, d_edges, d_frontier, d_next, d_visited, d_cost);
    advance<<<blocks, threads>>>(n, d_frontier, d_next, d_visited, d_go_on);
    CHECK(cudaMemcpy(&go_on, d_go_on, sizeof go_on, cudaMemcpyDeviceToHost));
  }
  CHECK(cudaMemcpy(cost.data(), d_cost, n * sizeof(int), cudaMemcpyDeviceToHost));
  // The host's search.
  std::vector<int> want(n, -1);
  std::queue<int> q;
  want[0] = 0;
  q.push(0);
  while (!q.empty()) {
    const int v = q.front();
    q.pop();
    for (int e = offsets[v]; e < offsets[v + 1]; ++e) {
      if (want[edges[e]] < 0) {
        want[edges[e]] = want[v] + 1;
        q.push(edges[e]);
      }
    }
  }
  int wrong = 0;
  for (int v = 0; v < n; ++v) wrong += cost[v] != want[v];
  for (void* p :
       {static_cast<void*>(d_offsets), static_cast<void*>(d_edges), static_cast<void*>(d_cost),
        static_cast<void*>(d_go_on), static_cast<void*>(d_frontier), static_cast<void*>(d_next),
        static_cast<void*>(d_visited)}) {
    CHECK(cudaFree(p));
  }
  std::printf("bfs: %d nodes, %d levels, %d wrong distances\n", n, levels, wrong);
  return wrong == 0 ? 0 : 1;
}
