// Device printf for the PTX interpreter tests: nvcc lowers each call to vprintf(fmt, args).

extern "C" __global__ void hello(int* ret) {
  int r = printf("hello from block %d thread %d\n", blockIdx.x, threadIdx.x);
  ret[blockIdx.x * blockDim.x + threadIdx.x] = r;
}

extern "C" __global__ void types(const char* s, unsigned long long big) {
  float f = 1.5f;
  double d = -2.25;
  printf("i=%i u=%u x=%x X=%X o=%o c=%c\n", -7, 4000000000u, 255, 255, 8, 'Z');
  printf("ld=%ld lld=%lld lu=%lu llu=%llu llx=%llx\n", -1234567890123L, -5LL, 42UL, big, big);
  printf("f=%f e=%e g=%g .2f=%.2f w=[%8.3f] [%-6d] [%06d] [%+d]\n", f, d, 0.0001, d, f, 12, 34, 5);
  printf("s=%s .3s=%.3s [%5s] p=%p %%\n", s, s, "ab", (void*)0x1234);
  printf("no args\n");
}
