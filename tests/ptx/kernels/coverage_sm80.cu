// Coverage corpus for features that need sm_80 or newer: redux.sync, cp.async pipelines, native
// bf16 arithmetic and atomics, libcu++ atomics with memory orders. Compiled for compute_80 and
// compute_90 (coverage_sm80, coverage_sm90) and run by coverage_test.cc.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cooperative_groups/reduce.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda/atomic>

namespace cg = cooperative_groups;

// out[t * 8 + k]
extern "C" __global__ void warp_reduce_ops(const int* in, unsigned* out) {
  int t = threadIdx.x;
  int v = in[t];
  unsigned u = (unsigned)v * 2654435761u;
  unsigned* o = out + t * 8;
  o[0] = (unsigned)__reduce_add_sync(0xffffffffu, v);
  o[1] = (unsigned)__reduce_min_sync(0xffffffffu, v - 50);
  o[2] = (unsigned)__reduce_max_sync(0xffffffffu, v - 50);
  o[3] = __reduce_min_sync(0xffffffffu, u);
  o[4] = __reduce_and_sync(0xffffffffu, u | 0x10);
  o[5] = __reduce_or_sync(0xffffffffu, u & 0xf0f0);
  o[6] = __reduce_xor_sync(0xffffffffu, u);
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(cg::this_thread_block());
  o[7] = (unsigned)cg::reduce(tile, v, cg::plus<int>());
}

// Tiles of `in` copied to shared memory with cp.async, then summed. blockDim.x == 128.
extern "C" __global__ void async_copy(const float4* in, float* out) {
  __shared__ float4 tile[2][128];
  int t = threadIdx.x;
  __pipeline_memcpy_async(&tile[0][t], &in[blockIdx.x * 256 + t], sizeof(float4));
  __pipeline_commit();
  __pipeline_memcpy_async(&tile[1][t], &in[blockIdx.x * 256 + 128 + t], sizeof(float4));
  __pipeline_commit();
  __pipeline_wait_prior(1);
  __syncthreads();
  float a = tile[0][(t + 1) % 128].x + tile[0][t].w;
  __pipeline_wait_prior(0);
  __syncthreads();
  float b = tile[1][(t + 5) % 128].y + tile[1][t].z;
  out[blockIdx.x * 128 + t] = a * 2 + b;
}

// cooperative_groups::memcpy_async of a block-sized chunk of ints. blockDim.x == 64.
extern "C" __global__ void cg_memcpy_async(const int* in, int* out, int n) {
  extern __shared__ int buf[];
  cg::thread_block block = cg::this_thread_block();
  cg::memcpy_async(block, buf, in + blockIdx.x * n, sizeof(int) * n);
  cg::wait(block);
  int t = threadIdx.x;
  int s = 0;
  for (int k = t; k < n; k += blockDim.x) s += buf[k] * (k % 7);
  out[blockIdx.x * blockDim.x + t] = s;
}

// out[i * 8 + k] (bit patterns)
extern "C" __global__ void bf16_native(const float* x, const float* y, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_bfloat16 a = __float2bfloat16(x[i]), b = __float2bfloat16(y[i]);
  __nv_bfloat162 a2 = __halves2bfloat162(a, b), b2 = __floats2bfloat162_rn(y[i], 1.5f);
  unsigned* o = out + i * 8;
  o[0] = __bfloat16_as_ushort(__hadd(a, b));
  o[1] = __bfloat16_as_ushort(__hmul(a, b));
  o[2] = __bfloat16_as_ushort(__hfma(a, b, a));
  o[3] = __bfloat16_as_ushort(__hmax(a, b));
  __nv_bfloat162 f = __hfma2(a2, b2, a2);
  o[4] = *reinterpret_cast<unsigned*>(&f);
  __nv_bfloat162 m = __hmin2(a2, b2);
  o[5] = *reinterpret_cast<unsigned*>(&m);
  __half h = __float2half(x[i]);
  o[6] = __half_as_ushort(__hmax_nan(h, __float2half(y[i])));
  o[7] = __bfloat16_as_ushort(__habs(__hneg(a)));
}

// Atomics that need sm_80+ (bf16) and libcu++ memory-order atomics.
extern "C" __global__ void atomics_sm80(__nv_bfloat16* bf, __nv_bfloat162* bf2, int* flag,
                                        unsigned long long* acc, int* data) {
  int t = threadIdx.x;
  atomicAdd(bf, __float2bfloat16(1.0f));
  atomicAdd(bf2, __floats2bfloat162_rn(0.5f, 2.0f));
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> a(*acc);
  a.fetch_add(t, cuda::memory_order_relaxed);
  cuda::atomic_ref<int, cuda::thread_scope_block> f(*flag);
  if (t == 0) {
    data[0] = 42;
    f.store(1, cuda::memory_order_release);
  }
  __syncthreads();
  if (f.load(cuda::memory_order_acquire) == 1) data[1 + t] = data[0] + t;
  cuda::atomic_ref<int, cuda::thread_scope_system> s(data[200]);
  s.fetch_max(t, cuda::memory_order_acq_rel);
  int expected = 0;
  s.compare_exchange_strong(expected, -1, cuda::memory_order_seq_cst);
}

// float2 / float4 atomicAdd: one vector atom on sm_90, scalar atomics before.
extern "C" __global__ void vector_atomics(float2* a, float4* b, float* old_sum) {
  int t = threadIdx.x;
#if __CUDA_ARCH__ >= 900
  float2 r = atomicAdd(a, make_float2(1.0f, 0.5f));
  atomicAdd(b, make_float4(1.0f, 2.0f, 3.0f, 0.25f * t));
#else
  float2 r;
  r.x = atomicAdd(&a->x, 1.0f);
  r.y = atomicAdd(&a->y, 0.5f);
  atomicAdd(&b->x, 1.0f);
  atomicAdd(&b->y, 2.0f);
  atomicAdd(&b->z, 3.0f);
  atomicAdd(&b->w, 0.25f * t);
#endif
  atomicAdd(old_sum, r.x + r.y);
}
