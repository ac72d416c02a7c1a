// Older ABI variants the NVIDIA driver still exports next to the current ones. cuda.h only
// declares them under __CUDA_API_VERSION_INTERNAL, so they are not in the manifest (whose
// signatures are checked against the public declarations); they are written here instead.
//
// Libraries look some of them up by name with dlsym and refuse to start when one is missing:
// cuBLASLt 13 resolves cuGraphInstantiate and cuStreamGetCaptureInfo_v2 (among ~80 others) in
// cublasLtCtxInit and fails cublasCreate with CUBLAS_STATUS_INTERNAL_ERROR ("Driver API
// initialization failed") when either is absent. tests/e2e checks that this library exports
// every name the toolkit's stub libcuda.so does.

#include <cuda.h>

#include "client-lib/core/client_call.h"

// The unversioned names below are macros for the newest variant in cuda.h; in the library's
// ABI they are the oldest variant, with its own signature.
#undef cuCtxCreate
#undef cuArrayCreate
#undef cuArrayGetDescriptor
#undef cuArray3DCreate
#undef cuArray3DGetDescriptor
#undef cuStreamGetCaptureInfo
#undef cuGraphInstantiate
#undef cuStreamBeginCapture
#undef cuStreamUpdateCaptureDependencies
#undef cuMemPrefetchAsync
#undef cuStreamBatchMemOp
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64

using cuwire::client::unsupported;

namespace {

// The v1 array descriptors cannot describe an array wider than 32 bits.
bool narrow(size_t v, unsigned int* out) {
  *out = static_cast<unsigned int>(v);
  return v <= 0xffffffffu;
}

// cuArrayGetDescriptor and cuArray3DGetDescriptor: the current descriptor, from `get`, in the
// v1 form V1.
template <typename V1, typename Current>
CUresult get_v1_descriptor(V1* out, CUarray array, CUresult CUDAAPI (*get)(Current*, CUarray)) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Current d{};
  if (CUresult e = get(&d, array)) return e;
  V1 v{};
  bool fits = narrow(d.Width, &v.Width) && narrow(d.Height, &v.Height);
  if constexpr (requires { v.Depth; }) {
    fits = fits && narrow(d.Depth, &v.Depth);
    v.Flags = d.Flags;
  }
  if (!fits) return CUDA_ERROR_INVALID_VALUE;
  v.Format = d.Format;
  v.NumChannels = d.NumChannels;
  *out = v;
  return CUDA_SUCCESS;
}

}  // namespace

// An entry point cuwire does not serve: unsupported(what), whatever the arguments (the types
// of its parameters follow `what`).
#define UNSUPPORTED(name, what, ...)  \
  CUresult CUDAAPI name(__VA_ARGS__); \
  CUresult CUDAAPI name(__VA_ARGS__) { return unsupported(what); }

extern "C" {

// Generated with the manifest's ptsz option (client_stubs.cc); cuda.h does not declare it.
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out, CUgraph* graph_out,
                                                const CUgraphNode** dependencies_out,
                                                const CUgraphEdgeData** edgeData_out,
                                                size_t* numDependencies_out);

// ---- contexts: cuCtxCreate and cuCtxCreate_v2 (CUDA 3.2 .. 12.x) take (pctx, flags, dev);
// cuCtxCreate_v3 (11.4) adds execution-affinity parameters.

CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && !paramsArray)) return CUDA_ERROR_INVALID_VALUE;
  if (numParams > 0) {
    CUctxCreateParams params{};
    params.execAffinityParams = paramsArray;
    params.numExecAffinityParams = numParams;
    return cuCtxCreate_v4(pctx, &params, flags, dev);  // answers "not supported"
  }
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}

// ---- stream capture: the older forms of the capture queries and updates.

// An older form and its per-thread-default-stream twin (name_ptsz), which forwards to the _ptsz
// form of the same newer entry point. `params` is the parenthesized parameter list and `args` the
// parenthesized arguments passed on.
#define FORWARD_WITH_PTSZ(name, params, target, args)  \
  CUresult CUDAAPI name params;                        \
  CUresult CUDAAPI name params { return target args; } \
  CUresult CUDAAPI name##_ptsz params;                 \
  CUresult CUDAAPI name##_ptsz params { return target##_ptsz args; }

FORWARD_WITH_PTSZ(cuStreamGetCaptureInfo,
                  (CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out),
                  cuStreamGetCaptureInfo_v3,
                  (hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr))

FORWARD_WITH_PTSZ(cuStreamGetCaptureInfo_v2,
                  (CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out,
                   CUgraph* graph_out, const CUgraphNode** dependencies_out,
                   size_t* numDependencies_out),
                  cuStreamGetCaptureInfo_v3,
                  (hStream, captureStatus_out, id_out, graph_out, dependencies_out, nullptr,
                   numDependencies_out))

UNSUPPORTED(cuStreamBeginCapture_ptsz, "cuStreamBeginCapture", CUstream)

CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream,
                                                           CUgraphNode* dependencies,
                                                           const CUgraphEdgeData* dependencyData,
                                                           size_t numDependencies,
                                                           unsigned int flags);

// The CUDA 11.3 form, without edge data.
FORWARD_WITH_PTSZ(cuStreamUpdateCaptureDependencies,
                  (CUstream hStream, CUgraphNode* dependencies, size_t numDependencies,
                   unsigned int flags),
                  cuStreamUpdateCaptureDependencies_v2,
                  (hStream, dependencies, nullptr, numDependencies, flags))

// ---- graphs (not supported): the CUDA 10 .. 12 instantiation with an error log.

// (phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize)
UNSUPPORTED(cuGraphInstantiate, "cuGraphInstantiate", CUgraphExec*, CUgraph, CUgraphNode*, char*,
            size_t)
UNSUPPORTED(cuGraphInstantiate_v2, "cuGraphInstantiate", CUgraphExec*, CUgraph, CUgraphNode*, char*,
            size_t)

// ---- memory: per-thread-stream variants of older ABIs (all not supported here).

// (devPtr, count, dstDevice, hStream)
UNSUPPORTED(cuMemPrefetchAsync_ptsz, "cuMemPrefetchAsync", CUdeviceptr, size_t, CUdevice, CUstream)

// ---- CUDA arrays: the CUDA 3.0 ABI with 32-bit sizes in the descriptors.

namespace {
struct ArrayDescriptorV1 {
  unsigned int Width;
  unsigned int Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct Array3DDescriptorV1 {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
}  // namespace

CUresult CUDAAPI cuArrayCreate(CUarray* pHandle, const ArrayDescriptorV1* pAllocateArray);
CUresult CUDAAPI cuArrayCreate(CUarray* pHandle, const ArrayDescriptorV1* pAllocateArray) {
  if (!pAllocateArray) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY_DESCRIPTOR d{pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Format,
                          pAllocateArray->NumChannels};
  return cuArrayCreate_v2(pHandle, &d);
}

CUresult CUDAAPI cuArrayGetDescriptor(ArrayDescriptorV1* pArrayDescriptor, CUarray hArray);
CUresult CUDAAPI cuArrayGetDescriptor(ArrayDescriptorV1* pArrayDescriptor, CUarray hArray) {
  return get_v1_descriptor(pArrayDescriptor, hArray, &cuArrayGetDescriptor_v2);
}

CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const Array3DDescriptorV1* pAllocateArray);
CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const Array3DDescriptorV1* pAllocateArray) {
  if (!pAllocateArray) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{pAllocateArray->Width,       pAllocateArray->Height,
                            pAllocateArray->Depth,       pAllocateArray->Format,
                            pAllocateArray->NumChannels, pAllocateArray->Flags};
  return cuArray3DCreate_v2(pHandle, &d);
}

CUresult CUDAAPI cuArray3DGetDescriptor(Array3DDescriptorV1* pArrayDescriptor, CUarray hArray);
CUresult CUDAAPI cuArray3DGetDescriptor(Array3DDescriptorV1* pArrayDescriptor, CUarray hArray) {
  return get_v1_descriptor(pArrayDescriptor, hArray, &cuArray3DGetDescriptor_v2);
}

// ---- stream memory operations (CUDA 8 .. 11.6 names; not supported here).

// (stream, addr, value, flags)
UNSUPPORTED(cuStreamWaitValue32_ptsz, "cuStreamWaitValue32", CUstream, CUdeviceptr, cuuint32_t,
            unsigned int)
UNSUPPORTED(cuStreamWaitValue64_ptsz, "cuStreamWaitValue64", CUstream, CUdeviceptr, cuuint64_t,
            unsigned int)
UNSUPPORTED(cuStreamWriteValue32_ptsz, "cuStreamWriteValue32", CUstream, CUdeviceptr, cuuint32_t,
            unsigned int)
UNSUPPORTED(cuStreamWriteValue64_ptsz, "cuStreamWriteValue64", CUstream, CUdeviceptr, cuuint64_t,
            unsigned int)
// (stream, count, paramArray, flags)
UNSUPPORTED(cuStreamBatchMemOp_ptsz, "cuStreamBatchMemOp", CUstream, unsigned int,
            CUstreamBatchMemOpParams*, unsigned int)

// ---- texture references (deprecated; not supported here).

// (hTexRef, desc, dptr, Pitch)
UNSUPPORTED(cuTexRefSetAddress2D_v2, "cuTexRefSetAddress2D", CUtexref, const CUDA_ARRAY_DESCRIPTOR*,
            CUdeviceptr, size_t)

}  // extern "C"

#undef FORWARD_WITH_PTSZ
#undef UNSUPPORTED
