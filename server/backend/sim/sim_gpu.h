// SimGpu: the sim backend's Backend. One object simulates every device of a server; its
// implementation is split by area over sim_<area>.cc: device, context, memory (and
// memory_pools), vmm, array, texture, tensor_map, stream, graph, module, launch, green and
// profile; sim_backend.cc makes it.
//
// Thread-safety: every entry point may be called from many threads at once. Each OS thread has
// its own current-context stack, as with the real driver. Lock order: mu_ before mem_mu_;
// neither is held while waiting for queued work.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/backend/backend.h"
#include "server/backend/sim/sim_backend.h"
#include "server/backend/sim/sim_profile.h"
#include "server/backend/sim/sim_state.h"
#include "server/calls/copies.h"

namespace cuwire::server::sim {

struct Device {
  int ordinal = 0;
  uint64_t total_bytes = 0;
  CUdeviceptr next_address = 0;      // bump pointer in the device's window; guarded by mem_mu_
  uint64_t used_bytes = 0;           // guarded by mem_mu_
  std::shared_ptr<Context> primary;  // guarded by mu_, created on first retain
  int primary_refs = 0;
  unsigned primary_flags = 0;
  std::unique_ptr<Pool> default_pool;
  Pool* current_pool = nullptr;  // guarded by mu_
};

// One side of a strided copy after validation: host bytes plus whatever keeps them alive.
struct CopySide {
  uint8_t* p = nullptr;
  size_t pitch = 0;   // bytes between rows
  size_t slice = 0;   // bytes between 2D slices
  size_t extent = 0;  // bytes the region spans from p
  bool host = false;  // caller memory rather than a simulated allocation
  std::shared_ptr<Allocation> keep;
};

class SimGpu final : public Backend,
                     public DeviceOutputSource,
                     public DeviceMemoryIo,
                     public SessionObjects {
 public:
  explicit SimGpu(const SimOptions& options);
  ~SimGpu() override;

  CUresult cuInit(unsigned int Flags) override;
  CUresult cuDeviceGetCount(int* count) override;
  CUresult cuDeviceGet(CUdevice* device, int ordinal) override;
  CUresult cuDeviceGetName(char* name, int len, CUdevice dev) override;
  CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) override;
  CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) override;
  CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) override;
  CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) override;
  CUresult cuMemFree_v2(CUdeviceptr dptr) override;
  CUresult cuMemGetInfo_v2(size_t* free, size_t* total) override;
  CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) override;
  CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) override;
  CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) override;
  CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) override;
  CUresult cuStreamDestroy_v2(CUstream hStream) override;
  CUresult cuStreamSynchronize(CUstream hStream) override;
  CUresult cuDeviceGetLuid(char* luid, unsigned int* deviceNodeMask, CUdevice dev) override;
  CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) override;
  CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) override;
  CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) override;
  CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) override;
  CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) override;
  CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) override;
  CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) override;
  CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) override;
  CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) override;
  CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) override;
  CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                          CUdevice dev) override;
  CUresult cuCtxDestroy_v2(CUcontext ctx) override;
  CUresult cuCtxPushCurrent_v2(CUcontext ctx) override;
  CUresult cuCtxPopCurrent_v2(CUcontext* pctx) override;
  CUresult cuCtxSetCurrent(CUcontext ctx) override;
  CUresult cuCtxGetCurrent(CUcontext* pctx) override;
  CUresult cuCtxGetDevice(CUdevice* device) override;
  CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) override;
  CUresult cuCtxGetFlags(unsigned int* flags) override;
  CUresult cuCtxSetFlags(unsigned int flags) override;
  CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) override;
  CUresult cuCtxSynchronize(void) override;
  CUresult cuCtxSynchronize_v2(CUcontext ctx) override;
  CUresult cuCtxSetLimit(CUlimit limit, size_t value) override;
  CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) override;
  CUresult cuCtxGetCacheConfig(CUfunc_cache* pconfig) override;
  CUresult cuCtxSetCacheConfig(CUfunc_cache config) override;
  CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) override;
  CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) override;
  CUresult cuCtxResetPersistingL2Cache(void) override;
  CUresult cuCtxGetSharedMemConfig(CUsharedconfig* pConfig) override;
  CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) override;
  CUresult cuModuleLoad(CUmodule* module, const char* fname) override;
  CUresult cuModuleLoadData(CUmodule* module, const void* image) override;
  CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                              CUjit_option* options, void** optionValues) override;
  CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) override;
  CUresult cuModuleUnload(CUmodule hmod) override;
  CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) override;
  CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) override;
  CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) override;
  CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int numFunctions,
                                      CUmodule mod) override;
  CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod,
                                const char* name) override;
  CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                             void** jitOptionsValues, unsigned int numJitOptions,
                             CUlibraryOption* libraryOptions, void** libraryOptionValues,
                             unsigned int numLibraryOptions) override;
  CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                 void** jitOptionsValues, unsigned int numJitOptions,
                                 CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                 unsigned int numLibraryOptions) override;
  CUresult cuLibraryUnload(CUlibrary library) override;
  CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) override;
  CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) override;
  CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels,
                                     CUlibrary lib) override;
  CUresult cuLibraryGetModule(CUmodule* pMod, CUlibrary library) override;
  CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) override;
  CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                              const char* name) override;
  CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                               const char* name) override;
  CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel,
                                CUdevice dev) override;
  CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                CUdevice dev) override;
  CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) override;
  CUresult cuKernelGetName(const char** name, CUkernel hfunc) override;
  CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                size_t* paramSize) override;
  CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                              unsigned int ElementSizeBytes) override;
  CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) override;
  CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) override;
  CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                 unsigned int Flags) override;
  CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) override;
  CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) override;
  // Virtual memory management (sim_vmm.cc).
  CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                         CUmemAllocationGranularity_flags option) override;
  CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                               unsigned long long flags) override;
  CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) override;
  CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                       const CUmemAllocationProp* prop, unsigned long long flags) override;
  CUresult cuMemRelease(CUmemGenericAllocationHandle handle) override;
  CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                        CUmemAllocationHandleType handleType,
                                        unsigned long long flags) override;
  CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                          CUmemAllocationHandleType shHandleType) override;
  CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) override;
  CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                    CUmemGenericAllocationHandle handle, unsigned long long flags) override;
  CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) override;
  CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                          size_t count) override;
  CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                          CUdeviceptr ptr) override;
  CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                  CUmemGenericAllocationHandle handle) override;
  CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) override;
  CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) override;
  CUresult cuMemFreeHost(void* p) override;
  CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) override;
  CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) override;
  CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) override;
  CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) override;
  CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) override;
  CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) override;
  CUresult cuMemHostUnregister(void* p) override;
  CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) override;
  CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                        CUcontext srcContext, size_t ByteCount) override;
  CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) override;
  CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) override;
  CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) override;
  CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* pCopy) override;
  CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* pCopy) override;
  CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                         CUstream hStream) override;
  CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                             CUcontext srcContext, size_t ByteCount, CUstream hStream) override;
  CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                CUstream hStream) override;
  CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                CUstream hStream) override;
  CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                CUstream hStream) override;
  CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) override;
  CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) override;
  CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) override;
  CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) override;
  CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) override;
  CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                           size_t Height) override;
  CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                            size_t Height) override;
  CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                            size_t Height) override;
  CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                           CUstream hStream) override;
  CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                            CUstream hStream) override;
  CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                            CUstream hStream) override;
  CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                             size_t Height, CUstream hStream) override;
  CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                              size_t Width, size_t Height, CUstream hStream) override;
  CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                              size_t Height, CUstream hStream) override;
  CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) override;
  CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) override;
  CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) override;
  CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) override;
  CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) override;
  CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) override;
  CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool,
                              CUmemLocation* location) override;
  CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) override;
  CUresult cuMemPoolDestroy(CUmemoryPool pool) override;
  CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool_out, CUmemLocation* location,
                                  CUmemAllocationType type) override;
  CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location,
                           CUmemAllocationType type) override;
  CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                           CUmemoryPool pool) override;
  CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                   CUstream hStream) override;
  CUresult cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                            CUmemAllocationHandleType handleType,
                                            unsigned long long flags) override;
  CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags) override;
  CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) override;
  CUresult cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                  CUmemPoolPtrExportData* shareData) override;
  CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                 CUdeviceptr ptr) override;
  CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                 unsigned int flags, CUstream hStream) override;
  CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                          CUmemLocation location) override;
  CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attribute,
                                 CUdeviceptr ptr) override;
  CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                  void** data, CUdeviceptr ptr) override;
  CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                      int priority) override;
  CUresult cuStreamGetPriority(CUstream hStream, int* priority) override;
  CUresult cuStreamGetDevice(CUstream hStream, CUdevice* device) override;
  CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) override;
  CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) override;
  CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) override;
  CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) override;
  CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                               unsigned int flags) override;
  CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
                                  unsigned int flags) override;
  CUresult cuStreamQuery(CUstream hStream) override;
  // Stream memory operations (sim_stream.cc): a wait holds its stream until the word at addr
  // meets the condition (polled; given up when the stream shuts down); a write stores in
  // stream order. cuStreamBatchMemOp is split into these by the client library.
  CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                  unsigned int flags) override;
  CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                  unsigned int flags) override;
  CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                   unsigned int flags) override;
  CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                   unsigned int flags) override;
  CUresult stream_mem_op(CUstream h, CUdeviceptr addr, uint64_t value, unsigned width,
                         unsigned flags, bool write);
  CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) override;
  CUresult cuEventRecord(CUevent hEvent, CUstream hStream) override;
  CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) override;
  CUresult cuEventQuery(CUevent hEvent) override;
  CUresult cuEventSynchronize(CUevent hEvent) override;
  CUresult cuEventDestroy_v2(CUevent hEvent) override;
  CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) override;
  CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) override;
  CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) override;
  CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) override;
  CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) override;
  CUresult cuFuncGetName(const char** name, CUfunction hfunc) override;
  CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) override;
  CUresult cuFuncLoad(CUfunction function) override;
  CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                              size_t* paramSize) override;
  CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                          void** kernelParams, void** extra) override;
  CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                            void** extra) override;
  CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams) override;
  CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) override;
  CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) override;
  CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func,
                                                       int blockSize,
                                                       size_t dynamicSMemSize) override;
  CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                int blockSize,
                                                                size_t dynamicSMemSize,
                                                                unsigned int flags) override;
  CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                            CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                            size_t dynamicSMemSize, int blockSizeLimit) override;
  CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize,
                                                     CUfunction func,
                                                     CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                     size_t dynamicSMemSize, int blockSizeLimit,
                                                     unsigned int flags) override;
  CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                   int numBlocks, int blockSize) override;
  CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) override;
  CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) override;
  CUresult cuCtxDisablePeerAccess(CUcontext peerContext) override;
  CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                   CUdevice dstDevice) override;
  CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) override;
  // Green contexts and SM resources (sim_green.cc).
  CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent) override;
  CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent) override;
  CUresult cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev,
                            unsigned int flags) override;
  CUresult cuGreenCtxDestroy(CUgreenCtx hCtx) override;
  CUresult cuCtxFromGreenCtx(CUcontext* pContext, CUgreenCtx hCtx) override;
  CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource* resource,
                                  CUdevResourceType type) override;
  CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource* resource,
                               CUdevResourceType type) override;
  CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource* resource,
                                    CUdevResourceType type) override;
  CUresult cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups,
                                       const CUdevResource* input, CUdevResource* remaining,
                                       unsigned int useFlags, unsigned int minCount) override;
  CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* phDesc, CUdevResource* resources,
                                     unsigned int nbResources) override;
  CUresult cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent) override;
  CUresult cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent) override;
  CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx* phCtx) override;
  CUresult cuGreenCtxStreamCreate(CUstream* phStream, CUgreenCtx greenCtx, unsigned int flags,
                                  int priority) override;
  CUresult cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long* greenCtxId) override;

  CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) override;
  CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor,
                                   CUarray hArray) override;
  CUresult cuArrayDestroy(CUarray hArray) override;
  CUresult cuArray3DCreate_v2(CUarray* pHandle,
                              const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) override;
  CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor,
                                     CUarray hArray) override;
  CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                  const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                  unsigned int numMipmapLevels) override;
  CUresult cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray hMipmappedArray,
                                    unsigned int level) override;
  CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) override;
  CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                           size_t ByteCount) override;
  CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                           size_t ByteCount) override;
  CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void* srcHost,
                           size_t ByteCount) override;
  CUresult cuMemcpyAtoH_v2(void* dstHost, CUarray srcArray, size_t srcOffset,
                           size_t ByteCount) override;
  CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                           size_t ByteCount) override;
  CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void* srcHost,
                                size_t ByteCount, CUstream hStream) override;
  CUresult cuMemcpyAtoHAsync_v2(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                CUstream hStream) override;

  CUresult cuTexObjectCreate(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                             const CUDA_TEXTURE_DESC* pTexDesc,
                             const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) override;
  CUresult cuTexObjectDestroy(CUtexObject texObject) override;
  CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUtexObject texObject) override;
  CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* pTexDesc, CUtexObject texObject) override;
  CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* pResViewDesc,
                                          CUtexObject texObject) override;
  CUresult cuSurfObjectCreate(CUsurfObject* pSurfObject,
                              const CUDA_RESOURCE_DESC* pResDesc) override;
  CUresult cuSurfObjectDestroy(CUsurfObject surfObject) override;
  CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc,
                                       CUsurfObject surfObject) override;
  // Tensor maps (sim_tensor_map.cc): the arguments are checked as CUDA documents them and kept
  // in the map's opaque bytes. No simulated kernel reads them (the sim has no TMA unit).
  CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                  cuuint32_t tensorRank, void* globalAddress,
                                  const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                  const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                  CUtensorMapL2promotion l2Promotion,
                                  CUtensorMapFloatOOBfill oobFill) override;
  CUresult cuTensorMapEncodeIm2col(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                   cuuint32_t tensorRank, void* globalAddress,
                                   const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                   const int* pixelBoxLowerCorner, const int* pixelBoxUpperCorner,
                                   cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                   const cuuint32_t* elementStrides,
                                   CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                   CUtensorMapL2promotion l2Promotion,
                                   CUtensorMapFloatOOBfill oobFill) override;
  CUresult cuTensorMapEncodeIm2colWide(
      CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
      void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
      int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
      cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides,
      CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
      CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) override;

  CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) override;
  CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) override;
  CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) override;
  // The capture's status, id and graph (the one cuStreamEndCapture returns); captured work has
  // no node handles here, so no dependencies are reported.
  CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                     cuuint64_t* id_out, CUgraph* graph_out,
                                     const CUgraphNode** dependencies_out,
                                     const CUgraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) override;
  CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) override;
  CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) override;
  CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) override;
  CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to,
                              CUgraphEdgeData* edgeData, size_t* numEdges) override;
  CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char* path, unsigned int flags) override;
  CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                       unsigned long long flags) override;
  CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) override;
  CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) override;
  CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) override;
  CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                CUgraphExecUpdateResultInfo* resultInfo) override;
  // A conditional handle is the address of a 4-byte cell of device memory holding its value,
  // which device code sets with cudaGraphSetConditional (the interpreter stores to it) and the
  // client's graphs read (client-lib/calls/graphs_exec.cc). Only without a graph: conditional nodes
  // live in the client's graphs, never in the sim's captured ones.
  CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph,
                                          CUcontext ctx, unsigned int defaultLaunchValue,
                                          unsigned int flags) override;
  CUresult cuGraphDestroy(CUgraph hGraph) override;

  // A live texture (surface = false) or surface object, or null (sim_texture.cc).
  std::shared_ptr<const SimTexObject> find_object(uint64_t handle, bool surface);

  // The optional faces (backend.h): the sim has them all.
  DeviceOutputSource* device_output() override { return this; }
  DeviceMemoryIo* device_memory_io() override { return this; }
  SessionObjects* session_objects() override { return this; }
  // A client's launch: the kernel's layout is checked against what was sent (sim_launch.cc).
  CUresult launch_sent_kernel(LaunchKind kind, const CUlaunchConfig& config, CUfunction f,
                              SentKernelParams params) override;

  // DeviceOutputSource: printf output of the context's finished launches (sim_launch.cc).
  void take_device_output(CUcontext ctx, size_t max_bytes, std::string* out) override;

  // DeviceMemoryIo: device memory is host memory here (sim_memory.cc).
  bool addressable_in_one_piece(CUdeviceptr p, size_t n) override;
  CUresult device_memory_io(CUdeviceptr p, size_t n, CUstream stream,
                            const std::function<CUresult(uint8_t*)>& io) override;
  uint8_t* managed_host_view(CUdeviceptr p, size_t n, std::shared_ptr<void>* keep) override;

  // Allocation holding [p, p+n) (n may be 0), or null.
  std::shared_ptr<Allocation> find(CUdeviceptr p, size_t n);
  // Whether a kernel of `contexts` on `device`, of server session `session`, may reach `a`,
  // which none of them owns: one of them opened an interprocess handle of it
  // (cuIpcOpenMemHandle), or its memory pool, the same session's, grants `device` access
  // (cuMemPoolSetAccess).
  bool reachable_by(const Allocation& a, const std::vector<uint64_t>& contexts, int device,
                    uint64_t session);

  // SessionObjects
  void set_context_session(CUcontext ctx, uint64_t session) override;
  void set_pool_session(CUmemoryPool pool, uint64_t session) override;
  void set_context_reservations(CUcontext ctx, Reserve reserve) override;

  // What the sim has handed out and spends (sim_backend.h).
  std::vector<SimAddressRange> address_ranges();
  uint64_t used_bytes(int device);

 private:
  // ---- contexts (sim_context.cc)
  using CtxPtr = std::shared_ptr<Context>;
  // The calling thread's current context: INVALID_CONTEXT when none, CONTEXT_IS_DESTROYED
  // when it was destroyed under this thread, its sticky error when it faulted.
  CUresult current(CtxPtr* out, bool allow_sticky = false);
  // A setting of the current context (cuCtxGetFlags, cuCtxGetCacheConfig...): *out = its
  // `field`, read under mu_; INVALID_VALUE for a null `out`.
  template <class T>
  CUresult current_setting(T Context::*field, T* out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CtxPtr c;
    if (CUresult e = current(&c, true)) return e;
    std::shared_lock lock(mu_);
    *out = (*c).*field;
    return CUDA_SUCCESS;
  }
  // Sets one to `value`, already checked; `allow_sticky` as for current().
  template <class T>
  CUresult set_current_setting(T Context::*field, T value, bool allow_sticky = false) {
    CtxPtr c;
    if (CUresult e = current(&c, allow_sticky)) return e;
    std::unique_lock lock(mu_);
    (*c).*field = value;
    return CUDA_SUCCESS;
  }
  CUresult context_of(CUcontext h, CtxPtr* out);  // null h = current
  std::vector<CtxPtr>& thread_stack();
  CtxPtr make_context(int device, unsigned flags, bool primary);
  // Finishes queued work and frees everything ctx holds. Caller holds no lock.
  void clear_context(Context& ctx);
  // cuCtxDestroy (green false: never a primary or green context) and cuGreenCtxDestroy (green
  // true: only a green one): unregisters h, pops it off this thread's stack and clears it.
  CUresult destroy_context(void* h, bool green);
  CUresult sync_context(Context& ctx);

  // ---- streams (sim_stream.cc)
  size_t max_queued() const {
    return options_.max_queued_per_stream > 0 ? static_cast<size_t>(options_.max_queued_per_stream)
                                              : 0;
  }
  // Resolves a stream handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created stream)
  // in ctx; *ctx is replaced by the stream's own context for created streams.
  CUresult stream_of(CUstream h, CtxPtr* ctx, std::shared_ptr<Stream>* out);
  // A stream attribute getter: INVALID_VALUE for a null `out`, else *out = get(ctx, stream) of
  // the resolved stream.
  template <class T, class Get>
  CUresult stream_query(CUstream h, T* out, Get get) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CtxPtr ctx;
    std::shared_ptr<Stream> s;
    if (CUresult e = stream_of(h, &ctx, &s)) return e;
    *out = get(ctx, *s);
    return CUDA_SUCCESS;
  }
  // Queues fn on s with the legacy-default-stream dependencies; a capturing stream records it
  // instead, as the graph node `node` describes.
  MarkerPtr submit(Context& ctx, Stream& s, std::function<void(CUresult)> fn,
                   std::vector<MarkerPtr> extra_deps = {}, const NodeDesc& node = {});
  // Runs fn in stream order on the legacy stream and waits: how synchronous copies behave.
  CUresult run_sync(const CtxPtr& ctx, std::function<CUresult()> fn);
  CUresult stream_wait_marker(CUstream h, MarkerPtr m);
  // A stream of ctx, registered like cuStreamCreateWithPriority's (flags already checked).
  CUresult create_stream(const CtxPtr& ctx, unsigned flags, int priority, CUstream* ph);

  // ---- green contexts (sim_green.cc)
  // SMs a context's kernels may use: its green partition, else the whole device.
  uint32_t sms_of(const Context& ctx) const {
    return ctx.sm_count ? ctx.sm_count : static_cast<uint32_t>(options_.sm_count);
  }
  CUresult green_of(CUgreenCtx h, CtxPtr* out);
  // A context attribute getter: INVALID_VALUE for a null `out`, else *out = get(ctx) of the
  // context `resolve` (context_of, green_of) finds for `h`.
  template <class H, class T, class Get>
  CUresult context_query(CUresult (SimGpu::*resolve)(H, CtxPtr*), H h, T* out, Get get) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CtxPtr c;
    if (CUresult e = (this->*resolve)(h, &c)) return e;
    *out = get(c);
    return CUDA_SUCCESS;
  }
  // Records in ev all work queued so far in ctx's streams / makes them wait for ev.
  CUresult record_context(const CtxPtr& ctx, CUevent ev);
  CUresult wait_context(const CtxPtr& ctx, CUevent ev);
  // `op` (record_context, wait_context) on the context `resolve` finds for `h`.
  template <class H>
  CUresult context_event(CUresult (SimGpu::*resolve)(H, CtxPtr*), H h,
                         CUresult (SimGpu::*op)(const CtxPtr&, CUevent), CUevent ev) {
    CtxPtr c;
    if (CUresult e = (this->*resolve)(h, &c)) return e;
    return (this->*op)(c, ev);
  }
  CUresult sm_resource(int device, uint32_t first, uint32_t count, uint64_t split,
                       CUdevResource* out) const;
  template <class H>
  CUresult context_resource(CUresult (SimGpu::*resolve)(H, CtxPtr*), H h, bool green,
                            CUdevResource* resource, CUdevResourceType type);

  // ---- stream capture and graphs (sim_graph.cc)
  std::shared_ptr<Capture> capture_of(Stream& s);  // null when s is not capturing
  void invalidate_capture(Stream& s);
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the capture invalidated) when s is capturing:
  // synchronising or querying a capturing stream is illegal.
  CUresult refuse_in_capture(Stream& s);
  CUresult add_host_call(CUstream h, std::function<void(CUresult)> fn);

  // ---- memory (sim_memory.cc)
  // `align` (a power of two, at least 256) places the range's start; the gap before it is
  // address space only, never charged.
  CUresult allocate(Context& ctx, size_t bytes, MemKind kind, Pool* pool, CUdeviceptr* out,
                    size_t align = 256);
  // A captured graph's allocation, freed since, live again at its address (its pool, if
  // destroyed meanwhile, is no longer charged).
  void revive(const std::shared_ptr<Allocation>& a);
  CUresult free_allocation(CUdeviceptr p, bool from_pool_free);
  std::shared_ptr<Allocation> find_host(const void* p, size_t n);
  // Validates one side of a (strided) copy: device, unified, host or array memory.
  CUresult copy_side(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray array, size_t x,
                     size_t y, size_t z, size_t pitch, size_t height, size_t width, size_t rows,
                     size_t depth, CopySide* out);
  CUresult copy_linear_side(CUdeviceptr p, size_t n, CopySide* out);
  // [p, p + n) in two or more allocations next to each other (virtual-memory mappings of one
  // reservation): the pieces, in order. False when one allocation holds it, or none covers it.
  bool across_mappings(CUdeviceptr p, size_t n, std::vector<std::pair<CUdeviceptr, size_t>>* out);

  // ---- CUDA arrays (sim_array.cc)
  CUresult array_of(CUarray h, std::shared_ptr<SimArray>* out);
  CUresult create_array(const CUDA_ARRAY3D_DESCRIPTOR& d, CUarray* out);
  // An array's descriptor checked against the driver's rules and the device's limits (those of
  // mipmapped textures when `mipmapped`); *elem: its element size.
  CUresult check_array(const CUDA_ARRAY3D_DESCRIPTOR& d, int device, bool mipmapped, size_t* elem);
  // Zeroed storage of `bytes` for arrays, charged to ctx's device; uncharge_storage gives the
  // charge back (the bytes go with the last holder).
  CUresult new_storage(size_t bytes, Context& ctx, std::shared_ptr<Allocation>* out);
  void uncharge_storage(const Allocation& storage);
  CUresult mipmap_of(CUmipmappedArray h, std::shared_ptr<SimMipmap>* out);
  // The region (x bytes, y rows, z slices) of `width` bytes x `rows` x `depth` in an array.
  CUresult array_side(CUarray h, size_t x, size_t y, size_t z, size_t width, size_t rows,
                      size_t depth, CopySide* out);
  // An array's bytes as one linear range [offset, offset + n) (the 1D array copies).
  CUresult array_linear_side(CUarray h, size_t offset, size_t n, CopySide* out);
  void destroy_arrays(Context& ctx);  // caller holds no lock

  // ---- texture and surface objects (sim_texture.cc)
  CUresult resource_view(const CUDA_RESOURCE_DESC& r, bool surface, SimTexObject* out);
  // Registers a new texture or surface object; *out (CUtexObject, CUsurfObject) is its handle.
  CUresult create_object(std::shared_ptr<SimTexObject> o, unsigned long long* out);
  CUresult destroy_object(uint64_t handle, bool surface);
  CUresult object_of(uint64_t handle, bool surface, std::shared_ptr<const SimTexObject>* out);
  // A Get call's answer: *out = the `field` of the object (cuTexObjectGetTextureDesc...).
  template <class T>
  CUresult object_field(uint64_t handle, bool surface, T SimTexObject::*field, T* out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<const SimTexObject> o;
    if (CUresult e = object_of(handle, surface, &o)) return e;
    *out = (*o).*field;
    return CUDA_SUCCESS;
  }
  void destroy_objects(Context& ctx);  // caller holds no lock
  CUresult htoa(CUarray dst, size_t off, const void* src, size_t n, CUstream s, bool async);
  CUresult atoh(void* dst, CUarray src, size_t off, size_t n, CUstream s, bool async);
  CUresult memcpy_common(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, bool async);
  // A linear copy between the caller's host memory [host, host+n) and the device side
  // `device_side` validates (device memory or an array); n == 0 does nothing.
  CUresult host_copy(const void* host, size_t n, bool to_host, CUstream s, bool async,
                     const std::function<CUresult(CopySide*)>& device_side);
  CUresult htod(CUdeviceptr dst, const void* src, size_t n, CUstream s, bool async);
  CUresult dtoh(void* dst, CUdeviceptr src, size_t n, CUstream s, bool async);
  CUresult copy2d(const CUDA_MEMCPY2D* c, CUstream s, bool async, bool aligned);
  CUresult copy3d(const CUDA_MEMCPY3D_PEER* c, CUstream s, bool async);
  CUresult enqueue_copy(CopySide dst, CopySide src, size_t width, size_t rows, size_t depth,
                        CUstream s, bool async);
  CUresult memset_common(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width,
                         size_t height, CUstream s, bool async);
  CUresult host_alloc(void** pp, size_t bytes, unsigned flags);
  CUresult pointer_attribute(void* data, CUpointer_attribute a, CUdeviceptr p);
  Pool* pool_of(CUmemoryPool h);
  // At a synchronisation (stream, event, context) in server session `session`: each pool of that
  // session (and each untagged one) holding more than its release threshold gives back the
  // freed bytes above it, as the driver's pools do then.
  void release_pool_memory(uint64_t session);
  std::shared_ptr<SimGraph> graph_of(CUgraph h);  // null: no graph
  // Ends one import of pool allocation p in context ctx_id (cuMemPoolImportPointer): true when
  // it was one, false when p is no allocation that context imported.
  bool release_pool_import(CUdeviceptr p, uint64_t ctx_id);
  // What a free of p by ctx would end, decided in one lookup.
  enum class FreeOf {
    kOwn,      // an allocation of ctx's session, or none at all (the free path refuses that)
    kImport,   // a pool allocation ctx imported (cuMemPoolImportPointer): the import only
    kAnother,  // another server session's allocation (both tagged): never ctx's to free
  };
  FreeOf free_of(CUdeviceptr p, const Context& ctx);

  // ---- modules (sim_module.cc)
  // *why (when given): what was wrong with an image refused, for a JIT error log.
  CUresult load_image(const void* image, std::shared_ptr<const Image>* out,
                      std::string* why = nullptr);
  CUresult load_file(const char* path, std::shared_ptr<const Image>* out);
  CUresult instantiate(Context& ctx, std::shared_ptr<const Image> image, Library* lib,
                       Module** out);
  void unload_module(Module* m);  // caller holds mu_ exclusively
  // A CUfunction or a CUkernel (resolved in the current context) to its Function.
  CUresult function_of(CUfunction h, CtxPtr* ctx, Function** out);
  CUresult library_module(Context& ctx, Library* lib, Module** out);
  // The settings f runs with: those set on f itself, else its library kernel's on f's device,
  // else the defaults. A launch through a CUkernel runs the kernel's function in the current
  // context (function_of), so handle h, either kind, changes nothing. Caller holds mu_ (shared
  // is enough).
  FuncSettings settings_of(CUfunction h, const Function& f);
  CUresult kernel_settings(CUkernel k, CUdevice dev, FuncSettings** out, const KernelDesc** d);
  CUresult get_func_attribute(int* pi, CUfunction_attribute a, const KernelDesc& d,
                              const FuncSettings& s);
  // Sets attribute a in *s; marks it in *own (Function::set_here) when given.
  CUresult set_func_attribute(CUfunction_attribute a, int v, const KernelDesc& d, FuncSettings* s,
                              uint8_t* own = nullptr);

  // ---- launch (sim_launch.cc)
  // What a running launch holds for the scope's lifetime: `host_bytes` of the interpreter's
  // budget for running launches (SimOptions::launch_memory_bytes; the constructor waits for
  // room), and its threads' local memory, `device_bytes` charged to the device like an
  // allocation. held() is false, and nothing is held, when the device lacks that memory.
  class LaunchReservation {
   public:
    LaunchReservation(SimGpu& gpu, int device, uint64_t device_bytes, uint64_t host_bytes);
    ~LaunchReservation();
    LaunchReservation(const LaunchReservation&) = delete;
    LaunchReservation& operator=(const LaunchReservation&) = delete;
    bool held() const { return held_; }

   private:
    void release_host();

    SimGpu& gpu_;
    int device_;
    uint64_t device_bytes_;
    uint64_t host_bytes_;
    bool held_ = false;
  };
  // `sent`: what a client sent, when it was a client's launch (launch_sent_kernel).
  CUresult launch(CUfunction f, ptx::Dim3 grid, ptx::Dim3 block, unsigned shared, CUstream hstream,
                  void** params, void** extra, bool cooperative, ptx::Dim3 cluster = {0, 0, 0},
                  const SentKernelParams* sent = nullptr);
  CUresult cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                              const CUlaunchConfig* config) override;
  CUresult cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func,
                                        const CUlaunchConfig* config) override;
  // The cluster dimensions a cuLaunchKernelEx configuration's attributes give ({0,0,0}: none).
  static ptx::Dim3 cluster_of(const CUlaunchConfig& c);
  CUresult occupancy_blocks(int* blocks, const KernelDesc& d, const FuncSettings& s, int block_size,
                            size_t dynamic_shared);

  // A context's device heap, charged to `device` once reserved (sim_context.cc).
  std::shared_ptr<ptx::DeviceHeap> new_heap(int device, std::shared_ptr<ReservationHook> hook);

  // ---- devices (sim_device.cc)
  bool valid_device(CUdevice d) const { return d >= 0 && d < static_cast<int>(devices_.size()); }
  // NOT_INITIALIZED before cuInit, else INVALID_DEVICE for an ordinal no device has.
  CUresult initialized_device(CUdevice d) const {
    if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
    return valid_device(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  }
  // Device d's primary context while anyone retains it, else null.
  CtxPtr retained_primary(CUdevice d);
  CUresult device_attribute(CUdevice_attribute a, int dev, int* v);

  const SimOptions options_;
  // What the devices report (options_.profile; the default when that names none).
  const SimProfile& profile_;
  const uint64_t instance_;  // distinguishes backends in thread-local state
  std::vector<Device> devices_;
  // Per device: the threads that run launches' blocks beside the stream's (options_.threads).
  std::vector<std::unique_ptr<ptx::WorkerPool>> workers_;
  std::atomic<bool> initialized_{false};
  std::atomic<uint64_t> next_id_{1};

  // Registries of live handles (guarded by mu_).
  std::shared_mutex mu_;
  std::map<Context*, CtxPtr> contexts_;
  std::map<Stream*, std::weak_ptr<Stream>> streams_;
  std::map<Event*, std::unique_ptr<Event>> events_;
  std::map<Module*, std::unique_ptr<Module>> modules_;
  std::map<Function*, Module*> functions_;
  std::map<Library*, std::unique_ptr<Library>> libraries_;
  std::map<Kernel*, Library*> kernels_;
  std::map<Pool*, std::unique_ptr<Pool>> pools_;
  std::map<SimArray*, std::shared_ptr<SimArray>> arrays_;  // mipmap levels too
  std::map<SimMipmap*, std::shared_ptr<SimMipmap>> mipmaps_;
  std::map<uint64_t, std::shared_ptr<const SimTexObject>> objects_;
  std::map<SimGraph*, std::shared_ptr<SimGraph>> graphs_;
  // The graph of each node handle cuGraphGetNodes gave out, until that graph is destroyed.
  std::mutex nodes_mu_;
  std::unordered_map<const GraphOp*, SimGraph*> node_graphs_;  // guarded by nodes_mu_
  std::map<SimGraphExec*, std::unique_ptr<SimGraphExec>> graph_execs_;
  std::map<ResourceDesc*, std::unique_ptr<ResourceDesc>> descs_;
  uint64_t next_split_ = 1;  // guarded by mu_
  uint64_t next_capture_ = 1;
  uint64_t next_object_ = 1;

  // Interpreter memory of running launches (LaunchReservation), at most
  // options_.launch_memory_bytes. Not held with any other lock.
  std::mutex launch_mem_mu_;
  std::condition_variable launch_mem_cv_;
  uint64_t launch_mem_used_ = 0;  // guarded by launch_mem_mu_

  // The simulated address space (guarded by mem_mu_).
  std::shared_mutex mem_mu_;
  std::map<CUdeviceptr, std::shared_ptr<Allocation>> allocations_;
  std::map<uintptr_t, std::shared_ptr<Allocation>> host_ranges_;  // by host address
  CUdeviceptr next_host_alias_;
  uint64_t next_buffer_id_ = 1;
  // Virtual memory management (sim_vmm.cc), guarded by mem_mu_: reserved ranges (base ->
  // bytes), where the next one goes (a bump pointer in the reservation window), and physical
  // allocations by handle.
  struct Physical;
  std::map<CUdeviceptr, size_t> reservations_;
  CUdeviceptr next_reservation_ = 0;
  std::map<uint64_t, std::shared_ptr<Physical>> physical_;
  uint64_t next_physical_ = 1;
  bool mapped(CUdeviceptr ptr, size_t size);
};

// Maps a launch's fault to the driver's error code.
CUresult launch_error_code(ptx::LaunchError e);

}  // namespace cuwire::server::sim
