// Interprocess memory through the runtime: this program exports a device buffer
// (cudaIpcGetMemHandle) and runs itself again as a second process, which opens the handle,
// waits for the first's interprocess event, checks what the first wrote, runs a kernel on the
// buffer and closes it; the first then sees the kernel's result. A handle is refused in the process
// that made it, and once the memory is freed.
#include <cstring>
#include <string>
#include <vector>

#include "tests/e2e/child_process.h"

__global__ void twice_plus(int* p, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 2 + k;
}

static const int kN = 4096;

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "open") == 0) {
    // The exporter's event: recorded after its last write, waited for here.
    cudaEvent_t ev;
    CHECK(cudaIpcOpenEventHandle(&ev, from_hex<cudaIpcEventHandle_t>(argv[3])));
    CHECK(cudaStreamWaitEvent(0, ev, 0));
    CHECK(cudaEventSynchronize(ev));
    CHECK(cudaEventDestroy(ev));
    int* d = nullptr;
    CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&d), from_hex<cudaIpcMemHandle_t>(argv[2]),
                               cudaIpcMemLazyEnablePeerAccess));
    std::vector<int> h(kN);
    CHECK(cudaMemcpy(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < kN; ++i) EXPECT(h[i] == i * 3, "child: d[%d] = %d", i, h[i]);
    // Opened again in the same context: the same pointer, mapped until the last close.
    int* again = nullptr;
    CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&again),
                               from_hex<cudaIpcMemHandle_t>(argv[2]),
                               cudaIpcMemLazyEnablePeerAccess));
    EXPECT(again == d, "the handle opened twice gave %p, then %p", static_cast<void*>(d),
           static_cast<void*>(again));
    CHECK(cudaIpcCloseMemHandle(again));
    int first = -1;
    CHECK(cudaMemcpy(&first, d + 1, sizeof first, cudaMemcpyDeviceToHost));
    EXPECT(first == 3, "after one of two closes: d[1] = %d", first);
    twice_plus<<<(kN + 255) / 256, 256>>>(d, kN, 5);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaIpcCloseMemHandle(d));
    EXPECT(cudaIpcCloseMemHandle(d) != cudaSuccess, "a third close of a handle opened twice");
    cudaGetLastError();
    EXPECT(cudaMemcpy(&first, d, sizeof first, cudaMemcpyDeviceToHost) != cudaSuccess,
           "a copy from closed interprocess memory");
    cudaGetLastError();
    printf("child: opened, checked, changed and closed\n");
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "stale") == 0) {
    void* d = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&d, from_hex<cudaIpcMemHandle_t>(argv[2]),
                                         cudaIpcMemLazyEnablePeerAccess);
    EXPECT(e != cudaSuccess, "a handle of freed memory is refused");
    printf("child: the stale handle was refused (%s)\n", cudaGetErrorName(e));
    return 0;
  }
  int* d = nullptr;
  CHECK(cudaMalloc(&d, kN * sizeof(int)));
  std::vector<int> h(kN);
  for (int i = 0; i < kN; ++i) h[i] = i * 3;
  CHECK(cudaMemcpy(d, h.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t handle;
  CHECK(cudaIpcGetMemHandle(&handle, d));
  void* mine = nullptr;
  EXPECT(cudaIpcOpenMemHandle(&mine, handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess,
         "the exporting process cannot open its own handle");
  cudaGetLastError();
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK(cudaEventRecord(ev, 0));
  cudaIpcEventHandle_t event_handle;
  CHECK(cudaIpcGetEventHandle(&event_handle, ev));
  const std::string hex = to_hex(handle), event_hex = to_hex(event_handle);
  EXPECT(run_self(argv[0], {"open", hex, event_hex}) == 0, "the child process failed");
  CHECK(cudaMemcpy(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i)
    EXPECT(h[i] == i * 6 + 5, "d[%d] = %d after the child's kernel", i, h[i]);
  CHECK(cudaFree(d));
  EXPECT(run_self(argv[0], {"stale", hex, event_hex}) == 0, "the stale-handle child failed");
  CHECK(cudaEventDestroy(ev));
  printf("ipc_memory: all checks passed\n");
  return 0;
}
