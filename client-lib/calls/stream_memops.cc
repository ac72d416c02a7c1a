// cuStreamBatchMemOp: the batch's operations are sent in order as the stream memory operations
// they stand for (cuStreamWaitValue*/cuStreamWriteValue*, each asynchronous), so the server
// runs them in stream order one after another, as the driver runs a batch. The batch is
// checked whole before anything is sent: a bad operation fails the call with nothing queued.
// Memory barriers and remote-write flushes order nothing further here (every operation of a
// stream is already ordered with its neighbours) and are accepted.

#include <cuda.h>

#include <cstdint>
#include <cstring>

#include "client-lib/core/client_call.h"

namespace {

// The most operations one batch may hold (the driver's documented limit is 256).
constexpr unsigned kMaxBatch = 256;

bool GoodWord(CUdeviceptr addr, unsigned width) { return addr != 0 && addr % width == 0; }
bool GoodWaitFlags(unsigned flags) {
  return (flags & ~(3u | unsigned{CU_STREAM_WAIT_VALUE_FLUSH})) == 0;
}
bool GoodWriteFlags(unsigned flags) {
  return (flags & ~unsigned{CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER}) == 0;
}

// A refused operation is not sent (the stub returns the refusal as the call's result).
CUresult Refuse(bool ok, bool* handled) {
  if (ok) return CUDA_SUCCESS;
  if (handled) *handled = true;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

namespace cuwire::client {

CUresult check_wait_value(CUstream, CUdeviceptr addr, cuuint32_t, unsigned int, bool* handled) {
  return Refuse(GoodWord(addr, 4), handled);
}
CUresult check_wait_value(CUstream, CUdeviceptr addr, cuuint64_t, unsigned int, bool* handled) {
  return Refuse(GoodWord(addr, 8), handled);
}
CUresult check_write_value(CUstream, CUdeviceptr addr, cuuint32_t, unsigned int, bool* handled) {
  return Refuse(GoodWord(addr, 4), handled);
}
CUresult check_write_value(CUstream, CUdeviceptr addr, cuuint64_t, unsigned int, bool* handled) {
  return Refuse(GoodWord(addr, 8), handled);
}

}  // namespace cuwire::client

namespace {

// The operation as the app wrote it: any 32-bit value (not every one is an enumerator, and
// reading one that is not through the enum type is undefined).
uint32_t Kind(const CUstreamBatchMemOpParams& op) {
  uint32_t kind = 0;
  std::memcpy(&kind, &op, sizeof kind);  // `operation` leads every member of the union
  return kind;
}

bool Valid(const CUstreamBatchMemOpParams& op) {
  const auto& wait = op.waitValue;
  const auto& write = op.writeValue;
  switch (Kind(op)) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      return GoodWord(wait.address, 4) && GoodWaitFlags(wait.flags);
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      return GoodWord(wait.address, 8) && GoodWaitFlags(wait.flags);
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      return GoodWord(write.address, 4) && GoodWriteFlags(write.flags);
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      return GoodWord(write.address, 8) && GoodWriteFlags(write.flags);
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return op.flushRemoteWrites.flags == 0;
    case CU_STREAM_MEM_OP_BARRIER:
      return op.memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_SYS ||
             op.memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    default:
      return false;
  }
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                                       CUstreamBatchMemOpParams* ops, unsigned int flags) {
  if (flags != 0 || count == 0 || count > kMaxBatch || !ops) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i)
    if (!Valid(ops[i])) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    CUresult e = CUDA_SUCCESS;
    switch (Kind(op)) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        e = cuStreamWaitValue32_v2(stream, op.waitValue.address, op.waitValue.value,
                                   op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        e = cuStreamWaitValue64_v2(stream, op.waitValue.address, op.waitValue.value64,
                                   op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        e = cuStreamWriteValue32_v2(stream, op.writeValue.address, op.writeValue.value,
                                    op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        e = cuStreamWriteValue64_v2(stream, op.writeValue.address, op.writeValue.value64,
                                    op.writeValue.flags);
        break;
      default:  // barrier, flush: see above
        break;
    }
    if (e != CUDA_SUCCESS) return e;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
