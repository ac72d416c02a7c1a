// Warp-level primitives for the PTX interpreter tests.

extern "C" __global__ void warp_reduce(const float* in, float* out) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[t];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) out[t / 32] = v;
}

// out per thread: [0]=ballot(odd lane) [1]=all(t<limit) [2]=any(t==5) [3]=shfl_up
//                 [4]=shfl_xor [5]=shfl idx from lane 3 [6]=popc(activemask) in branch
extern "C" __global__ void warp_vote(int* out, int limit) {
  int t = threadIdx.x;
  int lane = t & 31;
  unsigned b = __ballot_sync(0xffffffffu, lane & 1);
  int all = __all_sync(0xffffffffu, t < limit);
  int any = __any_sync(0xffffffffu, t == 5);
  int up = __shfl_up_sync(0xffffffffu, t * 10, 1);
  int x = __shfl_xor_sync(0xffffffffu, t, 2);
  int idx = __shfl_sync(0xffffffffu, t * 7, 3);
  int act = 0;
  if (lane < 10) act = __popc(__activemask());
  int* o = out + t * 7;
  o[0] = (int)b;
  o[1] = all;
  o[2] = any;
  o[3] = up;
  o[4] = x;
  o[5] = idx;
  o[6] = act;
}
