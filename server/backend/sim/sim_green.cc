// Green contexts: SM resources, their splits and descriptors, contexts limited to a partition
// of a device's SMs, and context-wide event records and waits.
//
// A CUdevResource the sim hands out carries, in the driver-internal part of the struct, which
// SMs it stands for (ResourceTag); one handed back is checked against it. The sim runs a grid's
// blocks one after another whatever the partition, so a partition shows where CUDA shows it:
// in the SM count of the context's resource, its cooperative-launch limit and the occupancy
// figures that scale with SMs.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

constexpr uint32_t kTagMagic = 0x52535743;  // "CWSR"
// Compute capability 7.x: partitions of at least 2 SMs, in steps of 2 (CUDA's green-context
// guideline); with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING any count.
constexpr uint32_t kMinPartition = 2;
constexpr uint32_t kAlignment = 2;
// Descriptors have no destroy call in CUDA; the sim keeps at most this many.
constexpr size_t kMaxDescs = size_t{1} << 16;

struct ResourceTag {
  uint32_t magic;
  int32_t device;
  uint64_t split;  // 0: a whole resource (a device's, a context's), which may be split
  uint32_t first_sm;
  uint32_t sm_count;
};
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource::_internal_padding));

// The tag of a resource the caller hands back: INVALID_RESOURCE_TYPE for one that is not of
// SM type, INVALID_VALUE for one the sim did not make or whose public fields were changed.
CUresult read_tag(const CUdevResource& r, int devices, uint32_t device_sms, ResourceTag* out) {
  int type = 0;
  std::memcpy(&type, &r.type, sizeof type);
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  std::memcpy(out, r._internal_padding, sizeof *out);
  const bool ok = out->magic == kTagMagic && out->device >= 0 && out->device < devices &&
                  out->first_sm <= device_sms && out->sm_count <= device_sms - out->first_sm &&
                  r.sm.smCount == out->sm_count;
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult SimGpu::sm_resource(int device, uint32_t first, uint32_t count, uint64_t split,
                             CUdevResource* out) const {
  std::memset(out, 0, sizeof *out);
  out->type = CU_DEV_RESOURCE_TYPE_SM;
  out->sm.smCount = count;
  out->sm.minSmPartitionSize = kMinPartition;
  out->sm.smCoscheduledAlignment = kAlignment;
  const ResourceTag tag{kTagMagic, device, split, first, count};
  std::memcpy(out->_internal_padding, &tag, sizeof tag);
  return CUDA_SUCCESS;
}

CUresult SimGpu::green_of(CUgreenCtx h, CtxPtr* out) {
  std::shared_lock lock(mu_);
  auto it = contexts_.find(reinterpret_cast<Context*>(h));
  if (it == contexts_.end() || !it->second->green || !it->second->alive)
    return CUDA_ERROR_INVALID_CONTEXT;
  *out = it->second;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Resources

CUresult SimGpu::cuDeviceGetDevResource(CUdevice dev, CUdevResource* resource,
                                        CUdevResourceType type) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!resource) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  return sm_resource(dev, 0, static_cast<uint32_t>(options_.sm_count), 0, resource);
}

// The SMs of the context `resolve` finds for h, as a resource: `green`, the green context's
// partition; else the context's (its green partition's, or the whole device's: sms_of).
template <class H>
CUresult SimGpu::context_resource(CUresult (SimGpu::*resolve)(H, CtxPtr*), H h, bool green,
                                  CUdevResource* resource, CUdevResourceType type) {
  if (!resource) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr c;
  if (CUresult e = (this->*resolve)(h, &c)) return e;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  return sm_resource(c->device, c->first_sm, green ? c->sm_count : sms_of(*c), 0, resource);
}

CUresult SimGpu::cuCtxGetDevResource(CUcontext h, CUdevResource* resource, CUdevResourceType type) {
  return context_resource(&SimGpu::context_of, h, false, resource, type);
}

CUresult SimGpu::cuGreenCtxGetDevResource(CUgreenCtx h, CUdevResource* resource,
                                          CUdevResourceType type) {
  return context_resource(&SimGpu::green_of, h, true, resource, type);
}

CUresult SimGpu::cuDevSmResourceSplitByCount(CUdevResource* result, unsigned* nb_groups,
                                             const CUdevResource* input, CUdevResource* remaining,
                                             unsigned use_flags, unsigned min_count) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!nb_groups || !input) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned kKnown = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                              CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
  if (use_flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  // Thread-block clusters need compute capability 9.0; the simulated device is 7.5.
  if (use_flags & CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE)
    return CUDA_ERROR_INVALID_VALUE;
  ResourceTag in{};
  const auto device_sms = static_cast<uint32_t>(options_.sm_count);
  if (CUresult e = read_tag(*input, static_cast<int>(devices_.size()), device_sms, &in)) return e;
  // The groups of a split are not split again (CUDA: not before a green context is made of
  // them and its resource asked for).
  if (in.split != 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  if (min_count > in.sm_count) return CUDA_ERROR_INVALID_VALUE;
  if (result && *nb_groups == 0) return CUDA_ERROR_INVALID_VALUE;
  const bool fine = use_flags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING;
  const uint32_t min_size = fine ? 1 : kMinPartition;
  const uint32_t align = fine ? 1 : kAlignment;
  uint32_t size = std::max<uint32_t>(min_count, min_size);
  size = (size + align - 1) / align * align;
  const uint32_t groups = size ? in.sm_count / size : 0;
  const uint32_t n = result ? std::min<uint32_t>(*nb_groups, groups) : groups;
  uint64_t split = 0;
  {
    std::unique_lock lock(mu_);
    split = next_split_++;
  }
  for (uint32_t i = 0; i < n && result; ++i)
    sm_resource(in.device, in.first_sm + i * size, size, split, &result[i]);
  *nb_groups = n;
  if (remaining)
    sm_resource(in.device, in.first_sm + n * size, in.sm_count - n * size, split, remaining);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDevResourceGenerateDesc(CUdevResourceDesc* ph, CUdevResource* resources,
                                           unsigned nb) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ph || !resources || nb == 0) return CUDA_ERROR_INVALID_VALUE;
  const auto device_sms = static_cast<uint32_t>(options_.sm_count);
  std::vector<ResourceTag> tags(nb);
  for (unsigned i = 0; i < nb; ++i) {
    if (CUresult e =
            read_tag(resources[i], static_cast<int>(devices_.size()), device_sms, &tags[i]))
      return e;
  }
  auto desc = std::make_unique<ResourceDesc>();
  desc->device = tags[0].device;
  desc->first_sm = tags[0].first_sm;
  std::sort(tags.begin(), tags.end(),
            [](const ResourceTag& a, const ResourceTag& b) { return a.first_sm < b.first_sm; });
  for (size_t i = 0; i < tags.size(); ++i) {
    const ResourceTag& t = tags[i];
    // Several resources: of one device, from one split, none twice.
    if (t.device != desc->device) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (nb > 1 && (t.split == 0 || t.split != tags[0].split))
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (i > 0 && tags[i - 1].first_sm + tags[i - 1].sm_count > t.first_sm)
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    desc->sm_count += t.sm_count;
  }
  desc->first_sm = tags[0].first_sm;
  if (desc->sm_count == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  std::unique_lock lock(mu_);
  if (descs_.size() >= kMaxDescs) return CUDA_ERROR_OUT_OF_MEMORY;
  ResourceDesc* raw = desc.get();
  descs_[raw] = std::move(desc);
  *ph = reinterpret_cast<CUdevResourceDesc>(raw);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Green contexts

CUresult SimGpu::cuGreenCtxCreate(CUgreenCtx* ph, CUdevResourceDesc desc, CUdevice dev,
                                  unsigned flags) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;  // it is required
  std::unique_lock lock(mu_);
  auto it = descs_.find(reinterpret_cast<ResourceDesc*>(desc));
  if (it == descs_.end() || it->second->device != dev) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr c = make_context(dev, 0, false);
  c->green = true;
  c->first_sm = it->second->first_sm;
  c->sm_count = it->second->sm_count;
  contexts_[c.get()] = c;
  *ph = reinterpret_cast<CUgreenCtx>(c.get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGreenCtxDestroy(CUgreenCtx h) { return destroy_context(h, true); }

CUresult SimGpu::cuCtxFromGreenCtx(CUcontext* pctx, CUgreenCtx h) {
  return context_query(&SimGpu::green_of, h, pctx,
                       [](const CtxPtr& c) { return reinterpret_cast<CUcontext>(c.get()); });
}

CUresult SimGpu::cuGreenCtxGetId(CUgreenCtx h, unsigned long long* id) {
  return context_query(&SimGpu::green_of, h, id, [](const CtxPtr& c) { return c->id; });
}

CUresult SimGpu::cuGreenCtxStreamCreate(CUstream* ph, CUgreenCtx h, unsigned flags, int priority) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;  // required
  CtxPtr c;
  if (CUresult e = green_of(h, &c)) return e;
  return create_stream(c, flags, priority, ph);
}

CUresult SimGpu::cuStreamGetGreenCtx(CUstream h, CUgreenCtx* out) {
  return stream_query(h, out, [](const CtxPtr& c, Stream&) {
    return c->green ? reinterpret_cast<CUgreenCtx>(c.get()) : nullptr;
  });
}

// ---------------------------------------------------------------------------------------------
// Context-wide records and waits

CUresult SimGpu::record_context(const CtxPtr& ctx, CUevent ev) {
  std::vector<MarkerPtr> deps;
  std::shared_ptr<Stream> aside;
  {
    std::unique_lock lock(mu_);
    auto it = events_.find(reinterpret_cast<Event*>(ev));
    if (it == events_.end() || !it->second->ctx || it->second->ctx->device != ctx->device)
      return CUDA_ERROR_INVALID_HANDLE;
    auto add = [&](const std::shared_ptr<Stream>& s) {
      if (!s) return true;
      if (s->capture) return false;
      if (MarkerPtr m = s->last(); m && !m->done()) deps.push_back(std::move(m));
      return true;
    };
    bool ok = add(ctx->null_stream);
    for (const auto& s : ctx->streams) ok = add(s) && ok;
    for (const auto& [tid, s] : ctx->per_thread_streams) ok = add(s) && ok;
    if (!ok) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!ctx->aside_stream)
      ctx->aside_stream = std::make_shared<Stream>(ctx.get(), CU_STREAM_NON_BLOCKING, 0, next_id_++,
                                                   false, max_queued());
    aside = ctx->aside_stream;
  }
  MarkerPtr m = aside->enqueue(std::move(deps), nullptr);
  std::shared_lock lock(mu_);
  auto it = events_.find(reinterpret_cast<Event*>(ev));
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard elock(it->second->state->mu);
  it->second->state->captured.reset();
  it->second->state->record = std::move(m);
  return CUDA_SUCCESS;
}

// Every stream the context has now waits for the event; CUDA also holds back streams made
// after the call, which the sim does not.
CUresult SimGpu::wait_context(const CtxPtr& ctx, CUevent ev) {
  MarkerPtr m;
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::unique_lock lock(mu_);
    auto it = events_.find(reinterpret_cast<Event*>(ev));
    if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
    {
      std::lock_guard elock(it->second->state->mu);
      if (it->second->state->captured.lock()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      m = it->second->state->record;
    }
    if (!ctx->null_stream)
      ctx->null_stream = std::make_shared<Stream>(ctx.get(), 0, 0, next_id_++, true, max_queued());
    streams.push_back(ctx->null_stream);
    streams.insert(streams.end(), ctx->streams.begin(), ctx->streams.end());
    for (const auto& [tid, s] : ctx->per_thread_streams) streams.push_back(s);
    for (const auto& s : streams)
      if (s->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!m) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  for (const auto& s : streams) s->enqueue({m}, nullptr);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxRecordEvent(CUcontext h, CUevent ev) {
  return context_event(&SimGpu::context_of, h, &SimGpu::record_context, ev);
}

CUresult SimGpu::cuCtxWaitEvent(CUcontext h, CUevent ev) {
  return context_event(&SimGpu::context_of, h, &SimGpu::wait_context, ev);
}

CUresult SimGpu::cuGreenCtxRecordEvent(CUgreenCtx h, CUevent ev) {
  return context_event(&SimGpu::green_of, h, &SimGpu::record_context, ev);
}

CUresult SimGpu::cuGreenCtxWaitEvent(CUgreenCtx h, CUevent ev) {
  return context_event(&SimGpu::green_of, h, &SimGpu::wait_context, ev);
}

}  // namespace cuwire::server::sim
