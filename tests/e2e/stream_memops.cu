// Stream memory operations, as NCCL and other frameworks use them: cuStreamWaitValue32/64
// hold a stream until a word meets a condition (GEQ with wrap-around, EQ, AND, NOR), written by
// a kernel or cuStreamWriteValue on another stream; cuStreamBatchMemOp runs a batch in order;
// a write captured in a graph happens when the graph runs; bad operations are refused.
#include "tests/e2e/check.h"
#include "tests/e2e/check_driver.h"

__global__ void set_after_work(unsigned* flag, unsigned value, int* data) {
  // Some work first, so the waiting stream really waits.
  int acc = 0;
  for (int i = 0; i < 20000; ++i) acc += i & 7;
  data[0] = acc;
  __threadfence();
  atomicExch(flag, value);
}

__global__ void copy_one(const int* from, int* to) { to[0] = from[0]; }

int main() {
  CHECK(cudaFree(nullptr));
  CUdevice dev;
  CU(cuCtxGetDevice(&dev));
  int ops = 0, ops64 = 0, nor = 0;
  CU(cuDeviceGetAttribute(&ops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev));
  CU(cuDeviceGetAttribute(&ops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  CU(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
  EXPECT(ops == 1 && ops64 == 1 && nor == 1, "attributes %d %d %d", ops, ops64, nor);

  unsigned* flag = nullptr;
  unsigned long long* word = nullptr;
  int *data = nullptr, *seen = nullptr;
  CHECK(cudaMalloc(&flag, 64));
  CHECK(cudaMalloc(&word, 64));
  CHECK(cudaMalloc(&data, 64));
  CHECK(cudaMalloc(&seen, 64));
  CHECK(cudaMemset(flag, 0, 64));
  CHECK(cudaMemset(word, 0, 64));
  CHECK(cudaMemset(seen, 0xff, 64));
  cudaStream_t waiter, producer;
  CHECK(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  const auto f = reinterpret_cast<CUdeviceptr>(flag);
  const auto w = reinterpret_cast<CUdeviceptr>(word);

  // The waiter holds until a kernel on the producer stream sets the flag to 5; what it runs
  // next sees the kernel's data.
  CU(cuStreamWaitValue32(reinterpret_cast<CUstream>(waiter), f, 5, CU_STREAM_WAIT_VALUE_GEQ));
  copy_one<<<1, 1, 0, waiter>>>(data, seen);
  set_after_work<<<1, 1, 0, producer>>>(flag, 5, data);
  CHECK(cudaStreamSynchronize(waiter));
  int h_data = 0, h_seen = 0;
  CHECK(cudaMemcpy(&h_data, data, 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&h_seen, seen, 4, cudaMemcpyDeviceToHost));
  EXPECT(h_seen == h_data && h_data == 20000 / 8 * 28, "waited for %d, saw %d", h_data, h_seen);

  // A write on one stream releases a 64-bit EQ wait on another.
  CU(cuStreamWaitValue64(reinterpret_cast<CUstream>(waiter), w, 0x1234567890ull,
                         CU_STREAM_WAIT_VALUE_EQ));
  CU(cuStreamWriteValue32(reinterpret_cast<CUstream>(waiter), f + 4, 77, 0));
  CU(cuStreamWriteValue64(reinterpret_cast<CUstream>(producer), w, 0x1234567890ull, 0));
  CHECK(cudaDeviceSynchronize());
  unsigned h_flag[2] = {};
  CHECK(cudaMemcpy(h_flag, flag, 8, cudaMemcpyDeviceToHost));
  EXPECT(h_flag[1] == 77, "write after the 64-bit wait: %u", h_flag[1]);

  // GEQ compares with wrap-around: 1 is "after" 0xffffffff. AND and NOR on set bits.
  CU(cuStreamWaitValue32(reinterpret_cast<CUstream>(waiter), f, 0xffffffffu,
                         CU_STREAM_WAIT_VALUE_GEQ));  // *f == 5
  CU(cuStreamWaitValue32(reinterpret_cast<CUstream>(waiter), f, 4, CU_STREAM_WAIT_VALUE_AND));
  CU(cuStreamWaitValue32(reinterpret_cast<CUstream>(waiter), f, 0xfffffff0u,
                         CU_STREAM_WAIT_VALUE_NOR));  // ~(5 | 0xfffffff0) = 0xa != 0
  CHECK(cudaStreamSynchronize(waiter));

  // A batch: write, wait for it, write a 64-bit value, a barrier; in order.
  CUstreamBatchMemOpParams batch[4] = {};
  batch[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  batch[0].writeValue.address = f + 8;
  batch[0].writeValue.value = 9;
  batch[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  batch[1].waitValue.address = f + 8;
  batch[1].waitValue.value = 9;
  batch[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  batch[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  batch[2].writeValue.address = w + 8;
  batch[2].writeValue.value64 = 0xabcdef0123456789ull;
  batch[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  batch[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
  CU(cuStreamBatchMemOp(reinterpret_cast<CUstream>(waiter), 4, batch, 0));
  CHECK(cudaStreamSynchronize(waiter));
  unsigned long long h_word[2] = {};
  CHECK(cudaMemcpy(h_word, word, 16, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(h_flag, flag + 2, 4, cudaMemcpyDeviceToHost));
  EXPECT(h_flag[0] == 9 && h_word[1] == 0xabcdef0123456789ull, "batch: %u %llx", h_flag[0],
         h_word[1]);

  // Captured: the write happens when the graph runs, not when it is captured.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(waiter, cudaStreamCaptureModeGlobal));
  CU(cuStreamWriteValue32(reinterpret_cast<CUstream>(waiter), f + 12, 42, 0));
  CHECK(cudaStreamEndCapture(waiter, &graph));
  CHECK(cudaMemcpy(h_flag, flag + 3, 4, cudaMemcpyDeviceToHost));
  EXPECT(h_flag[0] == 0, "written at capture: %u", h_flag[0]);
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, waiter));
  CHECK(cudaStreamSynchronize(waiter));
  CHECK(cudaMemcpy(h_flag, flag + 3, 4, cudaMemcpyDeviceToHost));
  EXPECT(h_flag[0] == 42, "graph write: %u", h_flag[0]);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  // Refused: a misaligned word, unknown flags, a bad batch (nothing of it runs), no memory.
  EXPECT(cuStreamWriteValue32(reinterpret_cast<CUstream>(waiter), f + 2, 1, 0) ==
             CUDA_ERROR_INVALID_VALUE,
         "misaligned write");
  // Unknown flags: refused by the server, at once or at the next synchronising call.
  CUresult r = cuStreamWaitValue32(reinterpret_cast<CUstream>(waiter), f, 1, 0x100);
  if (r == CUDA_SUCCESS) r = cuStreamSynchronize(reinterpret_cast<CUstream>(waiter));
  EXPECT(r == CUDA_ERROR_INVALID_VALUE, "unknown wait flags: %d", static_cast<int>(r));
  EXPECT(
      cuStreamWriteValue64(reinterpret_cast<CUstream>(waiter), 0, 1, 0) == CUDA_ERROR_INVALID_VALUE,
      "write to a null address");
  CUstreamBatchMemOpParams bad[2] = {};
  bad[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  bad[0].writeValue.address = f + 16;
  bad[0].writeValue.value = 1;
  bad[1].operation = static_cast<CUstreamBatchMemOpType>(99);
  EXPECT(
      cuStreamBatchMemOp(reinterpret_cast<CUstream>(waiter), 2, bad, 0) == CUDA_ERROR_INVALID_VALUE,
      "bad batch");
  CHECK(cudaStreamSynchronize(waiter));
  CHECK(cudaMemcpy(h_flag, flag + 4, 4, cudaMemcpyDeviceToHost));
  EXPECT(h_flag[0] == 0, "a refused batch ran its first write: %u", h_flag[0]);

  CHECK(cudaStreamDestroy(waiter));
  CHECK(cudaStreamDestroy(producer));
  CHECK(cudaFree(flag));
  CHECK(cudaFree(word));
  CHECK(cudaFree(data));
  CHECK(cudaFree(seen));
  // A wait nothing will meet, left pending at exit: the server gives it up with the session
  // (run_e2e then stops the server, which must not hang on it).
  unsigned* never = nullptr;
  cudaStream_t stuck;
  CHECK(cudaMalloc(&never, 4));
  CHECK(cudaMemset(never, 0, 4));
  CHECK(cudaStreamCreateWithFlags(&stuck, cudaStreamNonBlocking));
  CU(cuStreamWaitValue32(reinterpret_cast<CUstream>(stuck), reinterpret_cast<CUdeviceptr>(never), 1,
                         CU_STREAM_WAIT_VALUE_EQ));
  printf("stream_memops: all checks passed\n");
  return 0;
}
