/* A client for sm_partition_test: the green-context API through the server. It splits its
 * device's SMs into groups of `min` SMs, makes a green context of one group, runs a kernel in
 * it (on its own stream and on the context's null stream), and checks what CUDA promises on the
 * way: resources not handed out, or changed, are refused; a green context is destroyed as one.
 * Prints "green ok sms S groups N group G" or "fail WHAT: got X, want Y". With "leave" it exits
 * once work is queued in the green context, leaving everything to the server ("green left").
 *   green_probe MIN [leave] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/server/probe.h"

static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry add_one(.param .u64 p, .param .u32 n)\n"
    "{\n"
    "  .reg .u32 %r<6>;\n"
    "  .reg .u64 %rd<4>;\n"
    "  .reg .pred %q;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.u32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %q, %r5, %r1;\n"
    "  @%q bra DONE;\n"
    "  mul.wide.u32 %rd2, %r5, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r2, [%rd3];\n"
    "  add.u32 %r2, %r2, 1;\n"
    "  st.global.u32 [%rd3], %r2;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

static void expect(CUresult got, CUresult want, const char* what) {
  if (got != want) {
    printf("fail %s: got %s, want %s\n", what, name(got), name(want));
    exit(1);
  }
}

static void expect_int(long long got, long long want, const char* what) {
  if (got != want) {
    printf("fail %s: got %lld, want %lld\n", what, got, want);
    exit(1);
  }
}

int main(int argc, char** argv) {
  enum { kN = 4096 };
  CUdevice dev = 0;
  CUcontext primary = NULL, gctx = NULL, popped = NULL, owner = NULL;
  CUdevResource all, group[64], rest, copy, mine;
  CUdevResourceDesc desc = NULL;
  CUgreenCtx green = NULL, of_stream = NULL;
  CUmodule mod = NULL;
  CUfunction f = NULL;
  CUstream s = NULL;
  CUevent ev = NULL;
  CUdeviceptr p = 0;
  unsigned n = 0, i, min = argc > 1 ? (unsigned)atoi(argv[1]) : 2;
  unsigned long long id = 0;
  int host[kN], count = kN;
  void* params[2];
  const char* step = NULL;
  CUresult started = primary_context(&dev, &primary, &step);
  expect(started, CUDA_SUCCESS, step);
  expect(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS,
         "cuDeviceGetDevResource");

  /* Splits: how many groups, then the groups. */
  expect(cuDevSmResourceSplitByCount(NULL, &n, &all, NULL, 0, min), CUDA_SUCCESS, "split query");
  if (n == 0 || n > 64) expect_int(n, 1, "groups in range");
  {
    unsigned want = n;
    expect(cuDevSmResourceSplitByCount(group, &n, &all, &rest, 0, min), CUDA_SUCCESS, "split");
    expect_int(n, want, "groups made");
  }
  expect_int(group[0].sm.smCount, min, "group size");
  expect_int(rest.sm.smCount, all.sm.smCount - n * min, "remainder");
  /* What CUDA refuses: a group split again, a changed resource, a made-up one. */
  {
    unsigned m = 2;
    CUdevResource sub[2];
    expect(cuDevSmResourceSplitByCount(sub, &m, &group[0], NULL, 0, 2),
           CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "a group split again");
    copy = all;
    copy.sm.smCount += 2;
    expect(cuDevSmResourceSplitByCount(sub, &m, &copy, NULL, 0, 2), CUDA_ERROR_INVALID_VALUE,
           "a changed resource");
    memset(&copy, 0, sizeof copy);
    copy.type = CU_DEV_RESOURCE_TYPE_SM;
    copy.sm.smCount = 2;
    expect(cuDevSmResourceSplitByCount(sub, &m, &copy, NULL, 0, 2), CUDA_ERROR_INVALID_VALUE,
           "a made-up resource");
    expect(cuDevResourceGenerateDesc(&desc, &copy, 1), CUDA_ERROR_INVALID_VALUE,
           "a descriptor of a made-up resource");
  }

  /* A green context of one group. */
  expect(cuDevResourceGenerateDesc(&desc, group, 1), CUDA_SUCCESS, "cuDevResourceGenerateDesc");
  expect(cuGreenCtxCreate(&green, desc, dev, 0), CUDA_ERROR_INVALID_VALUE, "create without flag");
  expect(cuGreenCtxCreate(&green, (CUdevResourceDesc)(uintptr_t)12345, dev,
                          CU_GREEN_CTX_DEFAULT_STREAM),
         CUDA_ERROR_INVALID_VALUE, "create from an unknown descriptor");
  expect(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS,
         "cuGreenCtxCreate");
  expect(cuCtxFromGreenCtx(&gctx, green), CUDA_SUCCESS, "cuCtxFromGreenCtx");
  expect(cuCtxGetDevResource(gctx, &mine, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS,
         "cuCtxGetDevResource");
  expect_int(mine.sm.smCount, min, "the green context's SMs");
  expect(cuGreenCtxGetDevResource(green, &mine, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS,
         "cuGreenCtxGetDevResource");
  expect_int(mine.sm.smCount, min, "the green context's SMs (green)");
  expect(cuGreenCtxGetId(green, &id), CUDA_SUCCESS, "cuGreenCtxGetId");

  /* Work in it: its null stream, then a stream of its own, then a record of the whole. */
  expect(cuCtxPushCurrent(gctx), CUDA_SUCCESS, "cuCtxPushCurrent");
  expect(cuModuleLoadData(&mod, kPtx), CUDA_SUCCESS, "cuModuleLoadData");
  expect(cuModuleGetFunction(&f, mod, "add_one"), CUDA_SUCCESS, "cuModuleGetFunction");
  expect(cuMemAlloc(&p, sizeof host), CUDA_SUCCESS, "cuMemAlloc");
  expect(cuMemsetD32(p, 41, kN), CUDA_SUCCESS, "cuMemsetD32");
  params[0] = &p;
  params[1] = &count;
  expect(cuLaunchKernel(f, kN / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS,
         "launch on the null stream");
  {
    /* Launches are fire-and-forget: the refusal comes with the next synchronising call. */
    int per_sm = 0;
    CUresult r = cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 1024, 0);
    expect(r, CUDA_SUCCESS, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    r = cuLaunchCooperativeKernel(f, per_sm * min + 1, 1, 1, 1024, 1, 1, 0, NULL, params);
    if (!r) r = cuCtxSynchronize();
    expect(r, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "a cooperative grid past its SMs");
  }
  expect(cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS,
         "cuGreenCtxStreamCreate");
  expect(cuStreamGetGreenCtx(s, &of_stream), CUDA_SUCCESS, "cuStreamGetGreenCtx");
  if (of_stream != green)
    expect_int((long long)(uintptr_t)of_stream, (long long)(uintptr_t)green,
               "the stream's green context");
  expect(cuCtxSynchronize(), CUDA_SUCCESS, "cuCtxSynchronize");
  expect(cuLaunchKernel(f, kN / 256, 1, 1, 256, 1, 1, 0, s, params, NULL), CUDA_SUCCESS,
         "launch on its stream");
  if (argc > 2 && !strcmp(argv[2], "leave")) {
    /* Gone with its green context, stream, module and memory in place: the server reclaims. */
    printf("green left\n");
    return 0;
  }
  expect(cuEventCreate(&ev, 0), CUDA_SUCCESS, "cuEventCreate");
  expect(cuGreenCtxRecordEvent(green, ev), CUDA_SUCCESS, "cuGreenCtxRecordEvent");
  expect(cuEventSynchronize(ev), CUDA_SUCCESS, "cuEventSynchronize");
  expect(cuMemcpyDtoH(host, p, sizeof host), CUDA_SUCCESS, "cuMemcpyDtoH");
  for (i = 0; i < kN; ++i) expect_int(host[i], 43, "a value the kernels wrote");
  expect(cuCtxPopCurrent(&popped), CUDA_SUCCESS, "cuCtxPopCurrent");
  if (popped != gctx) expect_int(0, 1, "the popped context is the green one");
  expect(cuStreamGetCtx(s, &owner), CUDA_SUCCESS, "cuStreamGetCtx");

  /* Its end: as a green context, never as an ordinary one. */
  expect(cuCtxDestroy(gctx), CUDA_ERROR_INVALID_CONTEXT, "cuCtxDestroy of a green context");
  expect(cuGreenCtxDestroy(green), CUDA_SUCCESS, "cuGreenCtxDestroy");
  expect(cuCtxFromGreenCtx(&gctx, green), CUDA_ERROR_INVALID_CONTEXT, "a destroyed green context");
  expect(cuGreenCtxDestroy(green), CUDA_ERROR_INVALID_CONTEXT, "destroyed twice");
  expect(cuMemAlloc(&p, 16), CUDA_SUCCESS, "the primary context goes on");
  printf("green ok sms %u groups %u group %u\n", all.sm.smCount, n, min);
  return 0;
}
