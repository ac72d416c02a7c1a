// Streams and events of the sim backend: real asynchronous ordering and timing.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "tests/sim/sim_fixture.h"

namespace cuwire::server::testing {
namespace {

void CUDA_CB mark(void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); }

void CUDA_CB slow(void* p) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  static_cast<std::atomic<int>*>(p)->store(1);
}

void CUDA_CB record_status(CUstream, CUresult status, void* p) {
  *static_cast<CUresult*>(p) = status;
}

TEST_F(SimTest, StreamProperties) {
  CUstream s;
  EXPECT_EQ(api_->cuStreamCreate(&s, 0x8), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -3), CUDA_SUCCESS);
  unsigned flags = 0;
  int prio = 0;
  EXPECT_EQ(api_->cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_STREAM_NON_BLOCKING});
  EXPECT_EQ(api_->cuStreamGetPriority(s, &prio), CUDA_SUCCESS);
  EXPECT_EQ(prio, -3);
  CUcontext c = nullptr;
  EXPECT_EQ(api_->cuStreamGetCtx(s, &c), CUDA_SUCCESS);
  EXPECT_EQ(c, ctx_);
  CUdevice d = -1;
  EXPECT_EQ(api_->cuStreamGetDevice(s, &d), CUDA_SUCCESS);
  EXPECT_EQ(d, 0);
  unsigned long long id1 = 0, id2 = 0;
  EXPECT_EQ(api_->cuStreamGetId(s, &id1), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamGetId(CU_STREAM_LEGACY, &id2), CUDA_SUCCESS);
  EXPECT_NE(id1, id2);
  EXPECT_EQ(api_->cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api_->cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimTest, AsyncWorkRunsInStreamOrder) {
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  std::atomic<int> done{0}, count{0};
  ASSERT_EQ(api_->cuLaunchHostFunc(s, slow, &done), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamQuery(s), CUDA_ERROR_NOT_READY);  // returned before the work ran
  ASSERT_EQ(api_->cuLaunchHostFunc(s, mark, &count), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(count.load(), 1);
  CUresult status = CUDA_ERROR_UNKNOWN;
  ASSERT_EQ(api_->cuStreamAddCallback(s, record_status, &status, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(status, CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(SimTest, LegacyStreamWaitsForBlockingStreams) {
  CUstream blocking, nonblocking;
  ASSERT_EQ(api_->cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::atomic<int> slow_done{0}, after{0}, free_runner{0};
  ASSERT_EQ(api_->cuLaunchHostFunc(blocking, slow, &slow_done), CUDA_SUCCESS);
  // Work on the non-blocking stream does not wait for the blocking one.
  ASSERT_EQ(api_->cuLaunchHostFunc(nonblocking, mark, &free_runner), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(nonblocking), CUDA_SUCCESS);
  EXPECT_EQ(free_runner.load(), 1);
  EXPECT_EQ(slow_done.load(), 0);
  // Work on the legacy default stream does.
  ASSERT_EQ(api_->cuLaunchHostFunc(nullptr, mark, &after), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(slow_done.load(), 1);
  EXPECT_EQ(after.load(), 1);
  EXPECT_EQ(api_->cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(nonblocking), CUDA_SUCCESS);
}

TEST_F(SimTest, EventsOrderStreamsAndMeasureTime) {
  CUstream a, b;
  ASSERT_EQ(api_->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent start, stop, untimed;
  ASSERT_EQ(api_->cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventCreate(&stop, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventQuery(stop), CUDA_SUCCESS);  // never recorded
  float ms = 0;
  EXPECT_EQ(api_->cuEventElapsedTime_v2(&ms, start, stop), CUDA_ERROR_INVALID_HANDLE);

  std::atomic<int> slow_done{0};
  std::atomic<int> seen_by_b{-1};
  ASSERT_EQ(api_->cuEventRecord(start, a), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuLaunchHostFunc(a, slow, &slow_done), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventRecord(stop, a), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(api_->cuEventElapsedTime_v2(&ms, start, stop), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(api_->cuStreamWaitEvent(b, stop, 0), CUDA_SUCCESS);
  struct Probe {
    std::atomic<int>* from;
    std::atomic<int>* to;
  } probe{&slow_done, &seen_by_b};
  ASSERT_EQ(api_->cuLaunchHostFunc(
                b,
                [](void* p) {
                  auto* pr = static_cast<Probe*>(p);
                  pr->to->store(pr->from->load());
                },
                &probe),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(seen_by_b.load(), 1);  // b ran only after a's recorded work
  ASSERT_EQ(api_->cuEventSynchronize(stop), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventElapsedTime_v2(&ms, start, stop), CUDA_SUCCESS);
  EXPECT_GT(ms, 40.0f);
  EXPECT_LT(ms, 5000.0f);
  ASSERT_EQ(api_->cuEventRecord(untimed, a), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventSynchronize(untimed), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventElapsedTime_v2(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api_->cuEventDestroy_v2(start), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventDestroy_v2(start), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api_->cuEventDestroy_v2(stop), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventDestroy_v2(untimed), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(b), CUDA_SUCCESS);
}

TEST_F(SimTest, AsyncCopiesStageSourceBytes) {
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUdeviceptr p;
  ASSERT_EQ(api_->cuMemAlloc_v2(&p, 4), CUDA_SUCCESS);
  std::atomic<int> done{0};
  ASSERT_EQ(api_->cuLaunchHostFunc(s, slow, &done), CUDA_SUCCESS);
  int v = 41;
  ASSERT_EQ(api_->cuMemcpyHtoDAsync_v2(p, &v, 4, s), CUDA_SUCCESS);
  v = 99;  // the copy already owns its bytes, as with pageable memory on the driver
  int out = 0;
  ASSERT_EQ(api_->cuMemcpyDtoHAsync_v2(&out, p, 4, s), CUDA_SUCCESS);
  EXPECT_EQ(out, 41);  // pageable destination: complete when the call returns
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(SimTest, PerThreadDefaultStream) {
  std::atomic<int> n{0};
  ASSERT_EQ(api_->cuLaunchHostFunc(CU_STREAM_PER_THREAD, mark, &n), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(n.load(), 1);
}

// A captured graph's operations are its nodes, in capture order, with their types; its edges
// are the chain they run in. A node handle of a destroyed graph, or one the sim never made,
// names nothing.
TEST_F(SimTest, CapturedGraphNodesAreItsOperationsInOrder) {
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&d, 256), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(d, 1, 256, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoDAsync_v2(d + 128, d, 64, s), CUDA_SUCCESS);
  std::atomic<int> count{0};
  ASSERT_EQ(api_->cuLaunchHostFunc(s, mark, &count), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(api_->cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  size_t n = 4;
  CUgraphNode nodes[4] = {};
  ASSERT_EQ(api_->cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(nodes[3], nullptr);
  const CUgraphNodeType want[] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMCPY,
                                  CU_GRAPH_NODE_TYPE_HOST};
  for (size_t i = 0; i < 3; ++i) {
    CUgraphNodeType t{};
    ASSERT_EQ(api_->cuGraphNodeGetType(nodes[i], &t), CUDA_SUCCESS);
    EXPECT_EQ(t, want[i]) << "node " << i;
  }
  size_t edges = 0;
  ASSERT_EQ(api_->cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &edges), CUDA_SUCCESS);
  ASSERT_EQ(edges, 2u);
  CUgraphNode from[2], to[2];
  ASSERT_EQ(api_->cuGraphGetEdges_v2(g, from, to, nullptr, &edges), CUDA_SUCCESS);
  EXPECT_EQ(from[0], nodes[0]);
  EXPECT_EQ(to[0], nodes[1]);
  EXPECT_EQ(from[1], nodes[1]);
  EXPECT_EQ(to[1], nodes[2]);
  CUgraphNodeType t{};
  int unrelated = 0;
  EXPECT_EQ(api_->cuGraphNodeGetType(reinterpret_cast<CUgraphNode>(&unrelated), &t),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphNodeGetType(nodes[0], &t), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A wait captured on one stream runs on the stream its graph is launched on: it outlives the
// capturing stream, is released by the value it waits for, and is given up when the stream
// running it is destroyed (so the destroy returns instead of waiting forever).
TEST_F(SimTest, CapturedStreamWaitBelongsToTheStreamRunningIt) {
  CUstream a, b;
  ASSERT_EQ(api_->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&d, 8), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD32_v2(d, 0, 2), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamWaitValue32_v2(a, d, 1, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(api_->cuStreamEndCapture(a, &g), CUDA_SUCCESS);
  CUgraphExec x = nullptr;
  ASSERT_EQ(api_->cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphLaunch(x, b), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamDestroy_v2(a), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(api_->cuStreamQuery(b), CUDA_ERROR_NOT_READY);  // still waiting
  ASSERT_EQ(api_->cuMemsetD32_v2(d, 1, 1), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamSynchronize(b), CUDA_SUCCESS);
  // Launched again with the value unmet, then its stream destroyed: the wait is given up.
  ASSERT_EQ(api_->cuMemsetD32_v2(d, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphLaunch(x, b), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(api_->cuStreamDestroy_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(d), CUDA_SUCCESS);
}

// A captured graph with an allocation node has one executable graph at a time, as in CUDA; one
// without memory nodes has as many as the app makes.
TEST_F(SimTest, CapturedGraphWithMemoryNodesHasOneExecutableGraphAtATime) {
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api_->cuMemAllocAsync(&p, 256, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(p, 1, 256, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(api_->cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphExec x1 = nullptr, x2 = nullptr;
  ASSERT_EQ(api_->cuGraphInstantiateWithFlags(&x1, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphInstantiateWithFlags(&x2, g, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuGraphLaunch(x1, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphExecDestroy(x1), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphInstantiateWithFlags(&x2, g, 0), CUDA_SUCCESS);  // the first is gone
  ASSERT_EQ(api_->cuGraphExecDestroy(x2), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphDestroy(g), CUDA_SUCCESS);

  CUdeviceptr d = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&d, 256), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(d, 2, 256, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphInstantiateWithFlags(&x1, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphInstantiateWithFlags(&x2, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphExecDestroy(x1), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphExecDestroy(x2), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A capture that forks into a second stream and joins back records the fork and the join: the
// first operation has two dependents, the last two dependencies.
TEST_F(SimTest, CapturedForkAndJoinAreTheGraphsEdges) {
  CUstream s, s2;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork, join;
  ASSERT_EQ(api_->cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&d, 256), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(d, 1, 256, s), CUDA_SUCCESS);  // 0
  ASSERT_EQ(api_->cuEventRecord(fork, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamWaitEvent(s2, fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(d + 128, 2, 64, s2), CUDA_SUCCESS);  // 1, after 0
  ASSERT_EQ(api_->cuMemsetD8Async(d, 3, 64, s), CUDA_SUCCESS);         // 2, after 0
  ASSERT_EQ(api_->cuMemsetD8Async(d + 192, 4, 64, s2), CUDA_SUCCESS);  // 3, after 1
  ASSERT_EQ(api_->cuEventRecord(join, s2), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamWaitEvent(s, join, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoDAsync_v2(d + 64, d + 192, 64, s), CUDA_SUCCESS);  // 4, after 2, 3
  CUgraph g = nullptr;
  ASSERT_EQ(api_->cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  size_t n = 5;
  CUgraphNode nodes[5] = {};
  ASSERT_EQ(api_->cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  ASSERT_EQ(n, 5u);
  size_t edges = 0;
  ASSERT_EQ(api_->cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &edges), CUDA_SUCCESS);
  ASSERT_EQ(edges, 5u);
  CUgraphNode from[5], to[5];
  ASSERT_EQ(api_->cuGraphGetEdges_v2(g, from, to, nullptr, &edges), CUDA_SUCCESS);
  std::set<std::pair<int, int>> got;
  auto index = [&](CUgraphNode h) {
    return static_cast<int>(std::find(nodes, nodes + 5, h) - nodes);
  };
  for (size_t i = 0; i < edges; ++i) got.insert({index(from[i]), index(to[i])});
  const std::set<std::pair<int, int>> want = {{0, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 4}};
  EXPECT_EQ(got, want);
  // Launched, the graph does the captured work.
  CUgraphExec x = nullptr;
  ASSERT_EQ(api_->cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGraphLaunch(x, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  uint8_t h[256];
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(h, d, 256), CUDA_SUCCESS);
  EXPECT_EQ(h[0], 3);
  EXPECT_EQ(h[64], 4);
  EXPECT_EQ(h[128], 2);
  EXPECT_EQ(h[255], 4);
  EXPECT_EQ(api_->cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventDestroy_v2(fork), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventDestroy_v2(join), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s2), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A stream that waits on more recorded points than a capture keeps dependencies for (256)
// invalidates the capture rather than growing without bound.
TEST_F(SimTest, CaptureJoiningTooManyPointsIsInvalidated) {
  CUstream a, b;
  ASSERT_EQ(api_->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&d, 16), CUDA_SUCCESS);
  constexpr int kPoints = 300;
  std::vector<CUevent> events(kPoints + 1);
  for (CUevent& e : events)
    ASSERT_EQ(api_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamBeginCapture_v2(a, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventRecord(events[kPoints], a), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamWaitEvent(b, events[kPoints], 0), CUDA_SUCCESS);
  // Each of b's operations recorded as a point of its own; a joins them all.
  for (int i = 0; i < kPoints; ++i) {
    ASSERT_EQ(api_->cuMemsetD8Async(d, static_cast<unsigned char>(i), 16, b), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuEventRecord(events[i], b), CUDA_SUCCESS);
  }
  for (int i = 0; i < kPoints; ++i)
    ASSERT_EQ(api_->cuStreamWaitEvent(a, events[i], 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(d, 1, 16, a), CUDA_SUCCESS);
  CUgraph g = nullptr;
  EXPECT_EQ(api_->cuStreamEndCapture(a, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  for (CUevent e : events) EXPECT_EQ(api_->cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(d), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(a), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing
