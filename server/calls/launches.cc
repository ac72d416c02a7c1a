// Launches: cuLaunchKernel, cuLaunchCooperativeKernel and cuLaunchKernelEx.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/calls/call_helpers.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

namespace {

CUresult launch(SessionContext& cx, ArgReader& in, LaunchKind kind) {
  formats::LaunchArgs a{};
  std::span<const uint8_t> slots_raw, attrs_raw, params;
  if (!in.get(&a) || !in.get_array(&slots_raw, sizeof(formats::ParamSlot)) ||
      !in.get_array(&attrs_raw, sizeof(CUlaunchAttribute)) || !in.get_bulk(&params) ||
      !in.at_end()) {
    return in.malformed();
  }
  if (slots_raw.size() != size_t{a.num_params} * sizeof(formats::ParamSlot) ||
      attrs_raw.size() != size_t{a.num_attrs} * sizeof(CUlaunchAttribute) ||
      a.num_params > formats::kMaxParams || (kind != LaunchKind::kEx && a.num_attrs != 0)) {
    return in.malformed();
  }
  CUfunction f = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kFunction, a.function, &f)) return e;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  // The backend reads one pointer per kernel parameter and as many bytes as each parameter
  // has: the launch must carry exactly the kernel's parameters, each of its size.
  const std::vector<formats::ParamSlot>* layout = nullptr;
  if (CUresult e = kernel_layout(cx, a.function, &layout)) return e;
  if (layout->size() != a.num_params) return CUDA_ERROR_INVALID_VALUE;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, a.stream, &stream)) return e;
  // The parameter bytes, 16-byte aligned, and a pointer per parameter into them.
  std::vector<uint64_t> store((params.size() + 15) / 8 + 1);
  if (!params.empty()) std::memcpy(store.data(), params.data(), params.size());
  auto* base = reinterpret_cast<uint8_t*>(store.data());
  std::vector<void*> ptrs(a.num_params);
  for (uint32_t i = 0; i < a.num_params; ++i) {
    formats::ParamSlot s;
    std::memcpy(&s, slots_raw.data() + i * sizeof s, sizeof s);
    if (size_t{s.offset} + s.size > params.size()) return in.malformed();
    if (s.size != (*layout)[i].size) return CUDA_ERROR_INVALID_VALUE;
    ptrs[i] = base + s.offset;
  }
  // Launch attributes are checked before the launch waits for its turn on the GPU.
  std::vector<CUlaunchAttribute> attrs(a.num_attrs);
  if (!attrs.empty()) std::memcpy(attrs.data(), attrs_raw.data(), attrs_raw.size());
  for (const CUlaunchAttribute& at : attrs) {
    if (CUresult e = check_attribute(cx, at.id, at.value, /*launch=*/true)) return e;
  }
  CUlaunchConfig cfg{};
  cfg.gridDimX = a.grid[0];
  cfg.gridDimY = a.grid[1];
  cfg.gridDimZ = a.grid[2];
  cfg.blockDimX = a.block[0];
  cfg.blockDimY = a.block[1];
  cfg.blockDimZ = a.block[2];
  cfg.sharedMemBytes = a.shared_mem_bytes;
  cfg.hStream = stream;
  cfg.attrs = attrs.empty() ? nullptr : attrs.data();
  cfg.numAttrs = a.num_attrs;
  // What the client sent goes with the launch, so a backend that reads parameters itself (sim)
  // checks the kernel's layout against it as well, instead of reading past it.
  const SentKernelParams sent{ptrs, {base, params.size()}};
  Backend& backend = cx.backend();
  return cx.submit_work(
      stream, [&]() -> CUresult { return backend.launch_sent_kernel(kind, cfg, f, sent); });
}
}  // namespace

CUresult custom_cuLaunchKernel(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return launch(cx, in, LaunchKind::kPlain);
}

CUresult custom_cuLaunchCooperativeKernel(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return launch(cx, in, LaunchKind::kCooperative);
}

CUresult custom_cuLaunchKernelEx(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return launch(cx, in, LaunchKind::kEx);
}

// The cluster occupancy questions: the configuration rebuilt with the cluster dimension (if
// any) as its one attribute, on the session's stream-less launch configuration.
namespace {
CUresult cluster_query(SessionContext& cx, ArgReader& in, ReplyWriter& out, bool potential) {
  formats::ClusterQuery q{};
  if (!in.get(&q) || !in.at_end()) return in.malformed();
  CUfunction f = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kFunction, q.function, &f)) return e;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = q.cluster[0];
  attr.value.clusterDim.y = q.cluster[1];
  attr.value.clusterDim.z = q.cluster[2];
  CUlaunchConfig c{};
  c.gridDimX = q.grid[0];
  c.gridDimY = q.grid[1];
  c.gridDimZ = q.grid[2];
  c.blockDimX = q.block[0];
  c.blockDimY = q.block[1];
  c.blockDimZ = q.block[2];
  c.sharedMemBytes = q.shared_mem_bytes;
  c.attrs = &attr;
  c.numAttrs = q.cluster[0] || q.cluster[1] || q.cluster[2] ? 1 : 0;
  int answer = 0;
  const CUresult rc = potential ? cx.backend().cuOccupancyMaxPotentialClusterSize(&answer, f, &c)
                                : cx.backend().cuOccupancyMaxActiveClusters(&answer, f, &c);
  if (rc != CUDA_SUCCESS) return rc;
  out.put(static_cast<int32_t>(answer));
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuOccupancyMaxPotentialClusterSize(SessionContext& cx, ArgReader& in,
                                                   ReplyWriter& out) {
  return cluster_query(cx, in, out, true);
}

CUresult custom_cuOccupancyMaxActiveClusters(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return cluster_query(cx, in, out, false);
}

}  // namespace cuwire::server
