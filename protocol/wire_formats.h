// Argument formats of the calls whose both ends are hand-written: manifest mode `override`
// (client-lib) with `server=custom` (server/calls/). One place for both sides, so the
// two never drift apart. Every record is a fixed-layout POD put into a Call's args with
// ArgBuffer::put and read back with ArgCursor::get (native little-endian, explicit padding);
// arrays travel as ArgBuffer::put_bytes, big payloads as frame bulk.
//
// Each entry below names the call (its CallId) and the exact sequence on the wire.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

namespace cuwire::formats {

// ---- contexts -------------------------------------------------------------------------------
// cuDevicePrimaryCtxRetain:  args ContextArgs. Creates, on first sight of ctx_id, a context of
//   this session for `device` (the session's own "primary" context) bound to ctx_id; again with
//   a bound id it does nothing. Reply: nothing.
// cuDevicePrimaryCtxReset_v2: args ContextArgs. Destroys the context bound to ctx_id and binds
//   a fresh one for the same device to the same id (the handle stays valid, as the primary
//   context's handle does in CUDA). Reply: nothing.
// cuCtxCreate_v4: args ContextArgs (ctx_id minted by the client). Reply: nothing.
// The server leaves its thread's current context as it found it: the session switches contexts
// itself, by each Call's context id.
struct ContextArgs {
  uint64_t ctx_id;
  int32_t device;
  uint32_t flags;
};
// cuCtxDestroy_v2: args u64 ctx_id. Reply: nothing.

// ---- green contexts -------------------------------------------------------------------------
// An SM resource (CUdevResource) a client holds is the server's copy with its driver-internal
// bytes replaced: the type and SM figures, then in _internal_padding a ResourceRef naming the
// backend's resource, which the server keeps. A resource handed back is looked up by it.
inline constexpr uint32_t kResourceMagic = 0x53525743;  // "CWRS"
struct ResourceRef {
  uint32_t magic;
  uint32_t reserved;  // 0
  uint64_t id;
};
// cuGreenCtxCreate: args GreenContextArgs. Makes the green context and its CUcontext (as
// cuCtxFromGreenCtx gives it). Reply: GreenContextIds: the green context's id and its context's
// (a context of the session, in which the green context's streams, modules and memory live).
struct GreenContextArgs {
  uint64_t desc_id;
  int32_t device;
  uint32_t flags;
};
struct GreenContextIds {
  uint64_t green_id;
  uint64_t ctx_id;
};
// cuGreenCtxDestroy: args u64 green_id. Destroys everything made in its context, then it.
//   Reply: nothing.
// cuDevSmResourceSplitByCount: args SplitArgs, then the input CUdevResource. Reply: u32 groups
//   made (or, without want_result, that would be made), that many CUdevResource when
//   want_result, then one more, the remainder, when want_remaining.
struct SplitArgs {
  uint32_t groups;  // room in the result array (want_result)
  uint32_t use_flags;
  uint32_t min_count;
  uint8_t want_result;
  uint8_t want_remaining;
  uint16_t reserved;  // 0
};

// ---- device attributes ----------------------------------------------------------------------
// cuDeviceGetAttribute: args i32 device. Reply: u32 count, then `count` AttributeValue records,
// one per CUdevice_attribute from 0: the whole table in one round trip, which the client
// caches per device (attributes are immutable). cudart reads over a hundred of them at start-up.
struct AttributeValue {
  int32_t value;
  int32_t result;  // CUresult of that attribute's query
};
inline constexpr uint32_t kMaxAttributes = 1024;

// ---- modules --------------------------------------------------------------------------------
// cuLibraryLoadData: args: the image as bulk (u64 length in args, bytes in bulk). JIT and
//   library options are not sent (the client drops them). Reply: u64 library id.

// ---- kernel parameter layouts ---------------------------------------------------------------
// cuFuncGetParamInfo and cuKernelGetParamInfo: args u64 handle id (a CUfunction or a CUkernel;
//   the server asks whichever API fits the handle). Reply: u32 count, then count ParamSlot
//   records, by parameter index. The client caches the answer per handle.
struct ParamSlot {
  uint32_t offset;  // bytes from the start of the parameter buffer
  uint32_t size;    // bytes
};
inline constexpr uint32_t kMaxParams = 4096;  // more than any kernel can take (32 KiB of params)

// ---- launches -------------------------------------------------------------------------------
// cuLaunchKernel, cuLaunchCooperativeKernel, cuLaunchKernelEx (all fire-and-forget):
//   args LaunchArgs, then put_bytes(ParamSlot[num_params]), then put_bytes(CUlaunchAttribute
//   [num_attrs]) (Ex only; empty otherwise), then the packed parameter buffer as bulk. The server
//   rebuilds kernelParams from the slots over an aligned copy of the buffer.
struct LaunchArgs {
  uint64_t function;  // CUfunction or CUkernel id
  uint64_t stream;    // stream id (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a handle)
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_mem_bytes;
  uint32_t num_params;
  uint32_t num_attrs;
  uint32_t reserved;
};

// cuOccupancyMaxPotentialClusterSize, cuOccupancyMaxActiveClusters: args ClusterQuery; reply
//   the int32 answer. A launch configuration's cluster dimension attribute travels as
//   `cluster` (0s: none); its other attributes change no answer.
struct ClusterQuery {
  uint64_t function;  // CUfunction id
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_mem_bytes;
  uint32_t cluster[3];
};

// ---- 2D / 3D copies -------------------------------------------------------------------------
// cuMemcpy2D_v2, cuMemcpy2DUnaligned_v2, cuMemcpy3D_v2, cuMemcpy2DAsync_v2, cuMemcpy3DAsync_v2:
//   args CopyArgs; then, if the source is host memory, its WidthInBytes x Height x Depth bytes
//   packed row after row as bulk. Host pointers never travel: a HOST source means "the bulk"
//   (srcHost NULL, srcXInBytes = srcY = srcZ = 0, srcPitch = WidthInBytes, srcHeight = Height);
//   a HOST destination means "the reply's bulk", packed the same way, which the client scatters
//   into the app's rows. UNIFIED is resolved to HOST or DEVICE by the client. A 2D copy travels
//   as a CUDA_MEMCPY3D with Depth 1 and is executed as the 2D call it came from.
//   Reply: nothing, or the packed destination rows as bulk.
enum class CopyKind : uint32_t { k2D = 0, k2DUnaligned = 1, k3D = 2 };
struct CopyArgs {
  uint32_t kind;   // CopyKind
  uint32_t async;  // 1: the *Async variant on `stream`
  uint64_t stream;
  CUDA_MEMCPY3D desc;
};

// ---- device to host async copies ------------------------------------------------------------
// cuMemcpyDtoHAsync_v2 keeps the generated client stub (args: u64 srcDevice, u64 ByteCount,
// u64 stream id; reply bulk: the bytes). The server synchronises the stream before it replies,
// so the bytes are final when the client's call returns.

// ---- graphs ---------------------------------------------------------------------------------
// cuGraphGetNodes of a captured graph: args u64 graph id [, u32 1: the shape too]. Reply: u64
// node count; with the shape, then each node's u32 CUgraphNodeType, u64 edge count, and each
// edge as two u32 node indexes (from, to). The backend's node handles never travel: the client
// makes handles of its own for the nodes, which answer questions of type and structure only.

// Allocation and free nodes: CUDA restricts graphs holding them (no clone, no cloned child,
// one executable graph at a time, no node or edge removed).
inline bool is_memory_node(CUgraphNodeType t) {
  return t == CU_GRAPH_NODE_TYPE_MEM_ALLOC || t == CU_GRAPH_NODE_TYPE_MEM_FREE;
}

// ---- shareable handles and pool allocations -------------------------------------------------
// cuMemExportToShareableHandle: args u64 physical handle, u64 flags (0). Reply: u64 id, then a
// 32-byte secret. cuMemPoolExportToShareableHandle: args u64 pool id. Reply: the same.
// cuMemImportFromShareableHandle, cuMemPoolImportFromShareableHandle: args u64 id, 32-byte
// secret (from the sealed memfd the exporter's client made). Reply: u64 physical handle, or
// u64 pool id.
// cuMemPoolExportPointer: args u64 dptr. Reply: the 64-byte CUmemPoolPtrExportData (the
// backend's bytes). cuMemPoolImportPointer: args u64 pool id (an imported pool), the 64 bytes.
// Reply: u64 dptr, u64 size of the allocation.
// cuGraphDebugDotPrint of a captured graph: args u64 graph id, u32 flags, u64 want. The server
// has the backend write the DOT text to a file of its own and reads it back; want 0: reply u64
// its length; else (want is that length) reply bulk: the text, which the client writes to the
// app's path. Flags that would print the server's own addresses (handles, host pointers) are
// dropped (server/calls/graphs.cc kSafeDotFlags).

// ---- tensor maps -----------------------------------------------------------------------------
// cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide: args
//   TensorMapArgs, then arrays (u64 byte length, then the elements): globalDim (rank u64),
//   globalStrides (rank - 1 u64), and by call:
//     Tiled:      boxDim (rank u32), elementStrides (rank u32)
//     Im2col:     pixelBoxLowerCorner (rank - 2 i32), pixelBoxUpperCorner (rank - 2 i32),
//                 elementStrides (rank u32)
//     Im2colWide: elementStrides (rank u32)
//   The server checks that the tensor (globalDim and globalStrides from global_address) lies in
//   one allocation of the session before the backend encodes it. Reply: the CUtensorMap.
// cuTensorMapReplaceAddress has no server side: the client encodes the map again, from the
// arguments it was made with, at the new address.
inline constexpr uint32_t kMaxTensorRank = 5;
struct TensorMapArgs {
  uint64_t global_address;
  uint32_t data_type;
  uint32_t rank;
  uint32_t interleave;
  uint32_t swizzle;
  uint32_t l2_promotion;
  uint32_t oob_fill;
  uint32_t channels_per_pixel;  // im2col
  uint32_t pixels_per_column;   // im2col
  int32_t lower_corner_width;   // im2col wide
  int32_t upper_corner_width;   // im2col wide
  uint32_t wide_mode;           // im2col wide
  uint32_t reserved;            // 0
};

static_assert(std::is_trivially_copyable_v<ContextArgs>);
static_assert(std::is_trivially_copyable_v<LaunchArgs>);
static_assert(std::is_trivially_copyable_v<CopyArgs>);
static_assert(sizeof(ParamSlot) == 8);
static_assert(sizeof(AttributeValue) == 8);
static_assert(sizeof(ResourceRef) == 16 &&
              sizeof(ResourceRef) <= sizeof(CUdevResource::_internal_padding));
static_assert(sizeof(GreenContextArgs) == 16 && sizeof(GreenContextIds) == 16);
static_assert(sizeof(SplitArgs) == 16);
static_assert(sizeof(TensorMapArgs) == 56);

}  // namespace cuwire::formats
