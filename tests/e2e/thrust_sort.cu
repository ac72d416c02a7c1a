// thrust and cub sorts: thrust::sort and sort_by_key (radix sorts underneath) on 1k to 100k
// keys of several types, and cub::DeviceRadixSort called directly on a few thousand keys;
// each checked against std::sort on the host.
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <vector>

#include "tests/e2e/check.h"

static unsigned next_random(unsigned& s) {
  s = s * 1664525u + 1013904223u;
  return s >> 3;
}

template <class T>
static void sort_keys(int n, unsigned seed) {
  std::vector<T> host(n);
  for (int i = 0; i < n; ++i)
    host[i] = static_cast<T>(next_random(seed) % 100000) - static_cast<T>(20000);
  thrust::device_vector<T> d(host.begin(), host.end());
  thrust::sort(d.begin(), d.end());
  std::vector<T> got(n);
  thrust::copy(d.begin(), d.end(), got.begin());
  std::sort(host.begin(), host.end());
  for (int i = 0; i < n; ++i)
    EXPECT(got[i] == host[i], "thrust::sort of %d keys: [%d] wrong", n, i);
}

static void sort_pairs(int n, unsigned seed) {
  std::vector<unsigned> keys(n);
  std::vector<int> values(n);
  for (int i = 0; i < n; ++i) {
    keys[i] = next_random(seed) % 5000;
    values[i] = i;
  }
  thrust::device_vector<unsigned> dk(keys.begin(), keys.end());
  thrust::device_vector<int> dv(values.begin(), values.end());
  thrust::sort_by_key(dk.begin(), dk.end(), dv.begin());
  std::vector<unsigned> gk(n);
  std::vector<int> gv(n);
  thrust::copy(dk.begin(), dk.end(), gk.begin());
  thrust::copy(dv.begin(), dv.end(), gv.begin());
  // A stable sort: equal keys keep their original order.
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  for (int i = 0; i < n; ++i) {
    EXPECT(gk[i] == keys[order[i]] && gv[i] == order[i], "sort_by_key of %d: [%d] = (%u, %d)", n, i,
           gk[i], gv[i]);
  }
}

static void cub_sort(int n, unsigned seed) {
  std::vector<unsigned> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = next_random(seed);
  unsigned *in, *out;
  CHECK(cudaMalloc(&in, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
  CHECK(cudaMemcpy(in, keys.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  size_t temp_bytes = 0;
  CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, in, out, n));
  void* temp;
  CHECK(cudaMalloc(&temp, temp_bytes));
  CHECK(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, in, out, n));
  std::vector<unsigned> got(n);
  CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::sort(keys.begin(), keys.end());
  for (int i = 0; i < n; ++i) EXPECT(got[i] == keys[i], "cub sort of %d keys: [%d] wrong", n, i);
  CHECK(cudaFree(temp));
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
}

int main() {
  cub_sort(3000, 1);
  for (int n : {1000, 10000, 100000}) sort_keys<int>(n, 7 + n);
  sort_keys<float>(20000, 3);
  sort_keys<long long>(5000, 11);
  sort_pairs(30000, 5);
  CHECK(cudaDeviceSynchronize());
  printf("thrust_sort: all checks passed\n");
  return 0;
}
