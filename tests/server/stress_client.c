/* A client for the kill loop and the load test (server_load_test.cc): copies, launches, streams,
 * events and allocations through cuwire's libcuda.so.1, with every result checked.
 *
 *   stress_client forever SEED      runs until killed (prints "ready" once set up)
 *   stress_client check ITERS SEED  runs ITERS rounds; exit status 0 when every checksum held
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N (16 * 1024)

/* p[i] = p[i] * 3 + seed for i < n. */
static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry mix(.param .u64 p, .param .u32 n, .param .u32 seed)\n"
    "{\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .b64 %rd<4>;\n"
    "  .reg .pred %q;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  ld.param.u32 %r2, [seed];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.u32 %r3, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %q, %r3, %r1;\n"
    "  @%q ret;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r3, 4;\n"
    "  add.s64 %rd2, %rd2, %rd3;\n"
    "  ld.global.u32 %r6, [%rd2];\n"
    "  mad.lo.u32 %r6, %r6, 3, %r2;\n"
    "  st.global.u32 [%rd2], %r6;\n"
    "  ret;\n"
    "}\n";

static int fail(const char* what, CUresult r) {
  const char* name = "?";
  cuGetErrorName(r, &name);
  fprintf(stderr, "stress_client: %s failed: %s\n", what, name);
  return 1;
}

#define CHECK(x)                                 \
  do {                                           \
    CUresult r_ = (x);                           \
    if (r_ != CUDA_SUCCESS) return fail(#x, r_); \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: stress_client forever SEED | check ITERS SEED\n");
    return 2;
  }
  const int forever = strcmp(argv[1], "forever") == 0;
  const long iters = forever ? -1 : atol(argv[2]);
  const unsigned seed = (unsigned)atol(argv[forever ? 2 : 3]);
  static unsigned host[N], back[N];
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream streams[2];
  CUevent done;
  CUdeviceptr buf;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&fn, mod, "mix"));
  CHECK(cuStreamCreate(&streams[0], CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&streams[1], CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&done, 0));
  CHECK(cuMemAlloc(&buf, sizeof host));
  if (forever) {
    printf("ready\n");
    fflush(stdout);
  }
  for (long it = 0; forever || it < iters; ++it) {
    CUstream s = streams[it & 1];
    unsigned n = N;
    unsigned mix = seed * 2654435761u + (unsigned)it;
    for (unsigned i = 0; i < N; ++i) host[i] = i ^ mix;
    CHECK(cuMemcpyHtoDAsync(buf, host, sizeof host, s));
    void* params[] = {&buf, &n, &mix};
    CHECK(cuLaunchKernel(fn, N / 256, 1, 1, 256, 1, 1, 0, s, params, NULL));
    CHECK(cuEventRecord(done, s));
    /* A temporary allocation in flight while the stream works. */
    CUdeviceptr tmp;
    CHECK(cuMemAlloc(&tmp, 4096 + (it % 7) * 512));
    CHECK(cuMemsetD32Async(tmp, mix, 1024, streams[(it + 1) & 1]));
    CHECK(cuEventSynchronize(done));
    CHECK(cuMemcpyDtoH(back, buf, sizeof back));
    CHECK(cuStreamSynchronize(streams[(it + 1) & 1]));
    CHECK(cuMemFree(tmp));
    for (unsigned i = 0; i < N; ++i) {
      if (back[i] != (i ^ mix) * 3u + mix) {
        fprintf(stderr, "stress_client %u: round %ld: element %u is %u, expected %u\n", seed, it, i,
                back[i], (i ^ mix) * 3u + mix);
        return 1;
      }
    }
  }
  CHECK(cuMemFree(buf));
  CHECK(cuModuleUnload(mod));
  return 0;
}
