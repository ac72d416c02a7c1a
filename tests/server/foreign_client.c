/* A second client for kernels_test: holds device memory, a stream, an event and a CUDA array
 * in its own session, prints their handles, waits for a line on stdin, then checks that its memory
 * is untouched and its handles still work. Exit status 0 means its session was not disturbed. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define N 4096

static int fail(const char* what, CUresult r) {
  fprintf(stderr, "foreign_client: %s failed (%d)\n", what, (int)r);
  return 1;
}

int main(void) {
  CUresult r;
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr d;
  CUstream s;
  CUevent e;
  CUarray a;
  CUDA_ARRAY_DESCRIPTOR ad;
  unsigned char pattern[N], back[N];
  char line[64];
  if ((r = cuInit(0))) return fail("cuInit", r);
  if ((r = cuDeviceGet(&dev, 0))) return fail("cuDeviceGet", r);
  if ((r = cuDevicePrimaryCtxRetain(&ctx, dev))) return fail("cuDevicePrimaryCtxRetain", r);
  if ((r = cuCtxSetCurrent(ctx))) return fail("cuCtxSetCurrent", r);
  if ((r = cuMemAlloc(&d, N))) return fail("cuMemAlloc", r);
  for (int i = 0; i < N; ++i) pattern[i] = (unsigned char)(i * 13 + 1);
  if ((r = cuMemcpyHtoD(d, pattern, N))) return fail("cuMemcpyHtoD", r);
  if ((r = cuStreamCreate(&s, 0))) return fail("cuStreamCreate", r);
  if ((r = cuEventCreate(&e, 0))) return fail("cuEventCreate", r);
  ad.Width = 64;
  ad.Height = 16;
  ad.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  ad.NumChannels = 1;
  if ((r = cuArrayCreate(&a, &ad))) return fail("cuArrayCreate", r);
  if ((r = cuMemcpyHtoA(a, 0, pattern, N))) return fail("cuMemcpyHtoA", r);
  if ((r = cuStreamSynchronize(s))) return fail("cuStreamSynchronize", r);
  printf("%llx %llx %llx %llx %llx\n", (unsigned long long)d, (unsigned long long)(size_t)s,
         (unsigned long long)(size_t)e, (unsigned long long)(size_t)ctx,
         (unsigned long long)(size_t)a);
  fflush(stdout);
  if (!fgets(line, sizeof line, stdin)) return fail("reading the go-ahead", CUDA_SUCCESS);
  if ((r = cuMemcpyDtoH(back, d, N))) return fail("cuMemcpyDtoH", r);
  if (memcmp(back, pattern, N) != 0) return fail("memory changed by another session", CUDA_SUCCESS);
  memset(back, 0, N);
  if ((r = cuMemcpyAtoH(back, a, 0, N))) return fail("cuMemcpyAtoH", r);
  if (memcmp(back, pattern, N) != 0) return fail("array changed by another session", CUDA_SUCCESS);
  if ((r = cuArrayDestroy(a))) return fail("cuArrayDestroy", r);
  if ((r = cuEventRecord(e, s))) return fail("cuEventRecord", r);
  if ((r = cuEventSynchronize(e))) return fail("cuEventSynchronize", r);
  if ((r = cuStreamDestroy(s))) return fail("cuStreamDestroy", r);
  if ((r = cuMemFree(d))) return fail("cuMemFree", r);
  /* Left behind on purpose, for the server to reclaim at disconnect: memory, an array with a
   * texture and a surface object over it, a stream with a captured graph and its executable. */
  {
    CUdeviceptr leak;
    CUarray la;
    CUDA_ARRAY3D_DESCRIPTOR d3;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUtexObject to;
    CUsurfObject so;
    CUstream ls;
    CUgraph g;
    CUgraphExec ge;
    memset(&d3, 0, sizeof d3);
    memset(&res, 0, sizeof res);
    memset(&tex, 0, sizeof tex);
    d3.Width = 256;
    d3.Height = 64;
    d3.Format = CU_AD_FORMAT_FLOAT;
    d3.NumChannels = 4;
    d3.Flags = CUDA_ARRAY3D_SURFACE_LDST;
    if ((r = cuMemAlloc(&leak, 1 << 20))) return fail("cuMemAlloc (leak)", r);
    if ((r = cuArray3DCreate(&la, &d3))) return fail("cuArray3DCreate (leak)", r);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = la;
    if ((r = cuTexObjectCreate(&to, &res, &tex, NULL))) return fail("cuTexObjectCreate", r);
    if ((r = cuSurfObjectCreate(&so, &res))) return fail("cuSurfObjectCreate", r);
    if ((r = cuStreamCreate(&ls, CU_STREAM_NON_BLOCKING))) return fail("cuStreamCreate", r);
    if ((r = cuStreamBeginCapture(ls, CU_STREAM_CAPTURE_MODE_GLOBAL))) return fail("capture", r);
    if ((r = cuMemsetD32Async(leak, 7, 1024, ls))) return fail("cuMemsetD32Async", r);
    if ((r = cuStreamEndCapture(ls, &g))) return fail("cuStreamEndCapture", r);
    if ((r = cuGraphInstantiate(&ge, g, 0))) return fail("cuGraphInstantiate", r);
    if ((r = cuGraphLaunch(ge, ls))) return fail("cuGraphLaunch", r);
    if ((r = cuStreamSynchronize(ls))) return fail("cuStreamSynchronize (graph)", r);
  }
  printf("ok\n");
  return 0;
}
