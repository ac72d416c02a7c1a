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

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out);
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr,
                                   nullptr);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                             CUstreamCaptureStatus* captureStatus_out,
                                             cuuint64_t* id_out);
CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                             CUstreamCaptureStatus* captureStatus_out,
                                             cuuint64_t* id_out) {
  return cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, nullptr, nullptr,
                                        nullptr, nullptr);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream,
                                           CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out,
                                           const CUgraphNode** dependencies_out,
                                           size_t* numDependencies_out);
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream,
                                           CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out,
                                           const CUgraphNode** dependencies_out,
                                           size_t* numDependencies_out) {
  return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out,
                                   dependencies_out, nullptr, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out, CUgraph* graph_out,
                                                const CUgraphNode** dependencies_out,
                                                size_t* numDependencies_out);
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out, CUgraph* graph_out,
                                                const CUgraphNode** dependencies_out,
                                                size_t* numDependencies_out) {
  return cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, graph_out,
                                        dependencies_out, nullptr, numDependencies_out);
}

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream) { return unsupported("cuStreamBeginCapture"); }

// The CUDA 11.3 form, without edge data.
CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode* dependencies,
                                                   size_t numDependencies, unsigned int flags);
CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode* dependencies,
                                                   size_t numDependencies, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, nullptr, numDependencies,
                                              flags);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream,
                                                           CUgraphNode* dependencies,
                                                           const CUgraphEdgeData* dependencyData,
                                                           size_t numDependencies,
                                                           unsigned int flags);
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode* dependencies,
                                                        size_t numDependencies, unsigned int flags);
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode* dependencies,
                                                        size_t numDependencies, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2_ptsz(hStream, dependencies, nullptr,
                                                   numDependencies, flags);
}

// ---- graphs (not supported): the CUDA 10 .. 12 instantiation with an error log.

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                    CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize);
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t) {
  return unsupported("cuGraphInstantiate");
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                       CUgraphNode* phErrorNode, char* logBuffer,
                                       size_t bufferSize);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t) {
  return unsupported("cuGraphInstantiate");
}

// ---- memory: per-thread-stream variants of older ABIs (all not supported here).

CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                         CUstream hStream);
CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr, size_t, CUdevice, CUstream) {
  return unsupported("cuMemPrefetchAsync");
}

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
// The v1 descriptors cannot describe an array wider than 32 bits.
bool narrow(size_t v, unsigned int* out) {
  *out = static_cast<unsigned int>(v);
  return v <= 0xffffffffu;
}
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
  if (!pArrayDescriptor) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY_DESCRIPTOR d{};
  if (CUresult e = cuArrayGetDescriptor_v2(&d, hArray)) return e;
  ArrayDescriptorV1 v{};
  if (!narrow(d.Width, &v.Width) || !narrow(d.Height, &v.Height)) return CUDA_ERROR_INVALID_VALUE;
  v.Format = d.Format;
  v.NumChannels = d.NumChannels;
  *pArrayDescriptor = v;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const Array3DDescriptorV1* pAllocateArray);
CUresult CUDAAPI cuArray3DCreate(CUarray* pHandle, const Array3DDescriptorV1* pAllocateArray) {
  if (!pAllocateArray) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{pAllocateArray->Width,  pAllocateArray->Height,
                            pAllocateArray->Depth,  pAllocateArray->Format,
                            pAllocateArray->NumChannels, pAllocateArray->Flags};
  return cuArray3DCreate_v2(pHandle, &d);
}

CUresult CUDAAPI cuArray3DGetDescriptor(Array3DDescriptorV1* pArrayDescriptor, CUarray hArray);
CUresult CUDAAPI cuArray3DGetDescriptor(Array3DDescriptorV1* pArrayDescriptor, CUarray hArray) {
  if (!pArrayDescriptor) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  if (CUresult e = cuArray3DGetDescriptor_v2(&d, hArray)) return e;
  Array3DDescriptorV1 v{};
  if (!narrow(d.Width, &v.Width) || !narrow(d.Height, &v.Height) || !narrow(d.Depth, &v.Depth)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  v.Format = d.Format;
  v.NumChannels = d.NumChannels;
  v.Flags = d.Flags;
  *pArrayDescriptor = v;
  return CUDA_SUCCESS;
}

// ---- stream memory operations (CUDA 8 .. 11.6 names; not supported here).

CUresult CUDAAPI cuStreamWaitValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                          unsigned int flags);
CUresult CUDAAPI cuStreamWaitValue32_ptsz(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  return unsupported("cuStreamWaitValue32");
}
CUresult CUDAAPI cuStreamWaitValue64_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                          unsigned int flags);
CUresult CUDAAPI cuStreamWaitValue64_ptsz(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  return unsupported("cuStreamWaitValue64");
}
CUresult CUDAAPI cuStreamWriteValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                           unsigned int flags);
CUresult CUDAAPI cuStreamWriteValue32_ptsz(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  return unsupported("cuStreamWriteValue32");
}
CUresult CUDAAPI cuStreamWriteValue64_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                           unsigned int flags);
CUresult CUDAAPI cuStreamWriteValue64_ptsz(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  return unsupported("cuStreamWriteValue64");
}
CUresult CUDAAPI cuStreamBatchMemOp_ptsz(CUstream stream, unsigned int count,
                                         CUstreamBatchMemOpParams* paramArray, unsigned int flags);
CUresult CUDAAPI cuStreamBatchMemOp_ptsz(CUstream, unsigned int, CUstreamBatchMemOpParams*,
                                         unsigned int) {
  return unsupported("cuStreamBatchMemOp");
}

// ---- texture references (deprecated; not supported here).

CUresult CUDAAPI cuTexRefSetAddress2D_v2(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR* desc,
                                         CUdeviceptr dptr, size_t Pitch);
CUresult CUDAAPI cuTexRefSetAddress2D_v2(CUtexref, const CUDA_ARRAY_DESCRIPTOR*, CUdeviceptr,
                                         size_t) {
  return unsupported("cuTexRefSetAddress2D");
}

}  // extern "C"
