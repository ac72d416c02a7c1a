// Kernel launches: validation against the device limits, parameter packing, execution on the
// stream's worker through the PTX interpreter, and occupancy.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <unordered_set>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

constexpr int kSharedPerBlock = 48 << 10;
constexpr int kRegsPerSm = 65536;

// Device memory as one launch sees it: allocations of the launching context and of its peers,
// those it opened interprocess handles of, those of its session's pools that grant its device
// access, plus pinned host memory. Everything translated stays alive until the launch ends. The
// launch's block-running threads share it (one mutex; each caches its translations).
class LaunchMemory final : public ptx::GlobalMemory {
 public:
  LaunchMemory(SimGpu& gpu, std::vector<uint64_t> contexts, int device, uint64_t session)
      : gpu_(gpu), contexts_(std::move(contexts)), device_(device), session_(session) {}

  uint8_t* translate(uint64_t addr, uint64_t len) override {
    std::lock_guard lock(mu_);
    std::shared_ptr<Allocation> a = gpu_.find(addr, len);
    if (!a) return nullptr;
    // Portable pinned memory is every context's of the process that made it: here, of the
    // session that made it (design decision 13), never another session's.
    bool allowed = a->kind == MemKind::kHost && (a->host_flags & CU_MEMHOSTALLOC_PORTABLE) &&
                   a->session == session_;
    for (uint64_t c : contexts_) allowed = allowed || a->ctx_id == c;
    if (!allowed && !gpu_.reachable_by(*a, contexts_, device_, session_)) return nullptr;
    if (pinned_set_.insert(a.get()).second) pinned_.push_back(a);
    return a->bytes + (addr - a->base);
  }

  const ptx::TextureObject* texture(uint64_t handle) override {
    std::lock_guard lock(mu_);
    const SimTexObject* o = object(handle, false);
    return o ? &o->texture : nullptr;
  }
  const ptx::SurfaceObject* surface(uint64_t handle) override {
    std::lock_guard lock(mu_);
    const SimTexObject* o = object(handle, true);
    return o ? &o->surf : nullptr;
  }

 private:
  // Objects of the launching context (or a peer's), held until the launch ends.
  const SimTexObject* object(uint64_t handle, bool surface) {
    auto& cache = surface ? surfaces_ : textures_;
    auto it = cache.find(handle);
    if (it != cache.end()) return it->second.get();
    std::shared_ptr<const SimTexObject> o = gpu_.find_object(handle, surface);
    if (!o || std::find(contexts_.begin(), contexts_.end(), o->ctx_id) == contexts_.end()) {
      return nullptr;
    }
    return cache.emplace(handle, std::move(o)).first->second.get();
  }

  std::mutex mu_;  // guards everything below
  SimGpu& gpu_;
  std::vector<uint64_t> contexts_;
  int device_;
  uint64_t session_;
  std::unordered_set<const Allocation*> pinned_set_;
  std::vector<std::shared_ptr<Allocation>> pinned_;
  std::unordered_map<uint64_t, std::shared_ptr<const SimTexObject>> textures_, surfaces_;
};

const char* error_name(CUresult e) {
  switch (e) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
      return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case CUDA_ERROR_MISALIGNED_ADDRESS:
      return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case CUDA_ERROR_ASSERT:
      return "CUDA_ERROR_ASSERT";
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    default:
      return "CUDA_ERROR_LAUNCH_FAILED";
  }
}

}  // namespace

SimGpu::LaunchReservation::LaunchReservation(SimGpu& gpu, int device, uint64_t device_bytes,
                                             uint64_t host_bytes)
    : gpu_(gpu), device_(device), device_bytes_(device_bytes), host_bytes_(host_bytes) {
  // Launch checks refuse a launch larger than the whole budget, so this wait ends once running
  // launches (each bounded by the instruction budget) finish.
  {
    std::unique_lock lock(gpu_.launch_mem_mu_);
    uint64_t cap = gpu_.options_.launch_memory_bytes;
    gpu_.launch_mem_cv_.wait(lock, [&] { return host_bytes_ <= cap - gpu_.launch_mem_used_; });
    gpu_.launch_mem_used_ += host_bytes_;
  }
  std::unique_lock lock(gpu_.mem_mu_);
  Device& d = gpu_.devices_[device_];
  held_ = device_bytes_ <= d.total_bytes - d.used_bytes;
  if (held_) {
    d.used_bytes += device_bytes_;
    return;
  }
  lock.unlock();
  release_host();
}

SimGpu::LaunchReservation::~LaunchReservation() {
  if (!held_) return;
  {
    std::unique_lock lock(gpu_.mem_mu_);
    gpu_.devices_[device_].used_bytes -= device_bytes_;
  }
  release_host();
}

void SimGpu::LaunchReservation::release_host() {
  {
    std::lock_guard lock(gpu_.launch_mem_mu_);
    gpu_.launch_mem_used_ -= host_bytes_;
  }
  gpu_.launch_mem_cv_.notify_all();
}

CUresult launch_error_code(ptx::LaunchError e) {
  switch (e) {
    case ptx::LaunchError::kNone:
      return CUDA_SUCCESS;
    case ptx::LaunchError::kIllegalAddress:
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    case ptx::LaunchError::kUnsupportedOpcode:
      return CUDA_ERROR_ILLEGAL_INSTRUCTION;
    case ptx::LaunchError::kMisalignedAddress:
      return CUDA_ERROR_MISALIGNED_ADDRESS;
    case ptx::LaunchError::kAssert:
      return CUDA_ERROR_ASSERT;
    case ptx::LaunchError::kTimeout:
      return CUDA_ERROR_LAUNCH_TIMEOUT;
    case ptx::LaunchError::kOutOfResources:
      return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    case ptx::LaunchError::kTrap:
    case ptx::LaunchError::kInvalidLaunch:
    default:
      return CUDA_ERROR_LAUNCH_FAILED;
  }
}

CUresult SimGpu::launch(CUfunction h, ptx::Dim3 grid, ptx::Dim3 block, unsigned shared,
                        CUstream hstream, void** params, void** extra, bool cooperative,
                        ptx::Dim3 cluster, const SentKernelParams* sent_params) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  CtxPtr sctx = ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult e = stream_of(hstream, &sctx, &stream)) return e;
  if (CUresult e = sctx->sticky.load()) return e;

  std::shared_ptr<const Image> image;
  std::shared_ptr<const std::unordered_map<std::string, uint64_t>> vars;
  KernelDesc desc;
  FuncSettings settings;
  std::shared_ptr<ptx::DeviceHeap> heap;
  std::vector<uint64_t> visible;
  uint64_t session = 0;
  {
    std::shared_lock lock(mu_);
    if (!functions_.count(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (f->module->ctx != sctx.get()) return CUDA_ERROR_INVALID_HANDLE;
    image = f->module->image;
    vars = f->module->var_addresses;
    desc = *f->desc;
    settings = settings_of(h, *f);
    heap = sctx->heap;
    visible.push_back(sctx->id);
    for (Context* p : sctx->peers) visible.push_back(p->id);
    session = sctx->session;
  }

  // The driver's launch checks, in its order: dimensions, then resources.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (block.x > 1024 || block.y > 1024 || block.z > 64) return CUDA_ERROR_INVALID_VALUE;
  if (grid.x > static_cast<unsigned>(INT_MAX) || grid.y > 65535 || grid.z > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (desc.max_threads && threads > desc.max_threads) return CUDA_ERROR_INVALID_VALUE;
  int max_dynamic = settings.max_dynamic_shared >= 0
                        ? settings.max_dynamic_shared
                        : std::max(0, kSharedPerBlock - static_cast<int>(desc.static_shared));
  if (shared > static_cast<unsigned>(max_dynamic) ||
      uint64_t{shared} + desc.static_shared >
          static_cast<uint64_t>(profile_.shared_per_block_optin))
    return CUDA_ERROR_INVALID_VALUE;
  if (desc.num_regs && threads * desc.num_regs > kRegsPerSm)  // cubin counts (PTX: estimated)
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  // Blocks resident at once: as many as fit on the context's SMs at the profile's occupancy,
  // as on a GPU (they all advance, so blocks may wait for each other); a cooperative launch
  // must fit in them whole.
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  int per_sm = 0;
  occupancy_blocks(&per_sm, desc, settings, static_cast<int>(threads), shared);
  const uint64_t fits = uint64_t(std::max(per_sm, 1)) * std::max<uint64_t>(sms_of(*sctx), 1);
  if (cooperative && blocks > uint64_t(per_sm) * sms_of(*sctx))
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;

  // Thread-block clusters (compute capability 9.0 and later): the launch's, else the
  // kernel's __cluster_dims__; up to 8 blocks, tiling the grid, and fitting on the device.
  if (!cluster.x) cluster = desc.cluster;
  if (cluster.x || cluster.y || cluster.z) {
    if (profile_.arch() < 90) return CUDA_ERROR_NOT_SUPPORTED;
    const uint64_t size = uint64_t{cluster.x} * cluster.y * cluster.z;
    if (size == 0 || size > 8 || grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z ||
        size > fits)
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  } else if (desc.explicit_cluster) {
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }

  // The GPU reserves a kernel's local memory out of device memory at launch, and so does the
  // sim, for the threads of the blocks it holds at once. Registers and shared memory are
  // bounded by the checks above.
  const uint64_t block_local = threads * desc.thread_bytes;
  const uint64_t block_host =
      block_local + (threads + 31) / 32 * desc.warp_bytes + desc.static_shared + shared;
  uint64_t resident = std::min(blocks, fits);
  if (!cooperative && options_.launch_memory_bytes) {
    // Fewer resident blocks rather than a refusal when they would not fit the budget.
    resident = std::max<uint64_t>(
        1, std::min(resident, options_.launch_memory_bytes / std::max<uint64_t>(block_host, 1)));
  }
  uint64_t local = block_local * resident;
  {
    std::shared_lock lock(mem_mu_);
    const Device& d = devices_[sctx->device];
    if (local > d.total_bytes - d.used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Everything else the interpreter holds for a block (registers, stacks, shared memory)
  // counts against the host budget for running launches.
  uint64_t host = block_host * resident;
  if (options_.launch_memory_bytes && host > options_.launch_memory_bytes)
    return cooperative ? CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE : CUDA_ERROR_OUT_OF_MEMORY;
  if (!options_.launch_memory_bytes) host = 0;

  // Parameters: either one pointer per parameter, or one packed buffer through `extra`.
  std::vector<uint8_t> buffer(desc.param_bytes);
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  if (params) {
    // A client's launch says how many parameters and bytes it sent (SentKernelParams); the
    // kernel's layout must fit in them, or reading params[i] would leave what was sent.
    std::span<void* const> sent;
    std::span<const uint8_t> sent_bytes;
    const bool bounded = sent_params && sent_params->pointers.data() == params;
    if (bounded) {
      sent = sent_params->pointers;
      sent_bytes = sent_params->bytes;
    }
    if (bounded && sent.size() < desc.params.size()) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < desc.params.size(); ++i) {
      if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
      const ptx::ParamInfo& p = desc.params[i];
      if (uint64_t{p.offset} + p.size > buffer.size()) return CUDA_ERROR_INVALID_VALUE;
      if (bounded) {
        auto at = reinterpret_cast<uintptr_t>(params[i]);
        auto begin = reinterpret_cast<uintptr_t>(sent_bytes.data());
        if (at < begin || at - begin > sent_bytes.size() ||
            p.size > sent_bytes.size() - (at - begin))
          return CUDA_ERROR_INVALID_VALUE;
      }
      std::memcpy(buffer.data() + p.offset, params[i], p.size);
    }
  } else if (extra) {
    const void* data = nullptr;
    size_t size = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        data = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        if (!extra[i + 1]) return CUDA_ERROR_INVALID_VALUE;
        size = *static_cast<const size_t*>(extra[i + 1]);
        have_size = true;
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (!have_size || (size && !data) || size < desc.param_bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!buffer.empty()) std::memcpy(buffer.data(), data, buffer.size());
  } else if (!desc.params.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }

  if (!image->ptx) {
    spdlog::warn("sim: kernel {} cannot run: its image holds only SASS (no PTX to interpret)",
                 desc.name);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }

  ptx::LaunchConfig config;
  config.grid = grid;
  config.block = block;
  config.dynamic_shared_bytes = shared;
  config.max_instructions = options_.instruction_budget;
  config.cooperative = cooperative;
  config.pool = workers_[sctx->device].get();
  config.max_threads = static_cast<unsigned>(std::min<uint64_t>(resident, UINT_MAX));
  config.resident_blocks = resident;
  config.cluster = cluster;
  Context* raw_ctx = sctx.get();
  int device = sctx->device;
  auto kernel_label = [&] {
    return desc.name + " <<<(" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," +
           std::to_string(grid.z) + "), (" + std::to_string(block.x) + "," +
           std::to_string(block.y) + "," + std::to_string(block.z) + "), " +
           std::to_string(shared) + ">>>";
  };
  submit(
      *sctx, *stream,
      [this, raw_ctx, device, session, local, host, image, vars, config, heap, name = desc.name,
       buffer = std::move(buffer), visible = std::move(visible)](CUresult sticky) mutable {
        if (sticky != CUDA_SUCCESS) return;
        LaunchReservation reservation(*this, device, local, host);
        if (!reservation.held()) {
          spdlog::warn(
              "sim: kernel {} failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: its "
              "{} bytes of local memory do not fit in the device's free memory",
              name, local);
          raw_ctx->set_sticky(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
          return;
        }
        LaunchMemory memory(*this, visible, device, session);  // a graph may run it again
        config.params = buffer.data();
        config.params_size = buffer.size();
        config.heap = heap.get();
        ptx::LaunchResult r = image->ptx->launch(name, config, *vars, memory);
        spdlog::debug("sim: kernel {} ran {} thread-instructions (budget {})", name, r.instructions,
                      config.max_instructions);
        if (!r.printf_output.empty()) {
          std::lock_guard lock(raw_ctx->printf_mu);
          std::string& pending = raw_ctx->printf_output;
          size_t room =
              Context::kPendingPrintfBytes - std::min(pending.size(), Context::kPendingPrintfBytes);
          pending.append(r.printf_output, 0, std::min(room, r.printf_output.size()));
        }
        if (r.error == ptx::LaunchError::kNone) return;
        CUresult e = launch_error_code(r.error);
        spdlog::warn("sim: kernel {} failed with {}: {}", name, error_name(e), r.message);
        raw_ctx->set_sticky(e);
      },
      {}, NodeDesc(CU_GRAPH_NODE_TYPE_KERNEL, kernel_label));
  return CUDA_SUCCESS;
}

void SimGpu::take_device_output(CUcontext h, size_t max_bytes, std::string* out) {
  if (!h) return;
  CtxPtr ctx;
  if (context_of(h, &ctx) != CUDA_SUCCESS) return;
  std::lock_guard lock(ctx->printf_mu);
  std::string& pending = ctx->printf_output;
  size_t n = std::min(max_bytes, pending.size());
  out->append(pending, 0, n);
  pending.erase(0, n);
}

CUresult SimGpu::cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, CUstream s,
                                void** params, void** extra) {
  return launch(f, {gx, gy, gz}, {bx, by, bz}, shared, s, params, extra, false);
}

CUresult SimGpu::cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                           CUstream s, void** params) {
  return launch(f, {gx, gy, gz}, {bx, by, bz}, shared, s, params, nullptr, true);
}

CUresult SimGpu::cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params,
                                  void** extra) {
  if (!c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
  bool cooperative = false;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c->attrs[i].value.cooperative)
      cooperative = true;
  }
  return launch(f, {c->gridDimX, c->gridDimY, c->gridDimZ},
                {c->blockDimX, c->blockDimY, c->blockDimZ}, c->sharedMemBytes, c->hStream, params,
                extra, cooperative, cluster_of(*c));
}

ptx::Dim3 SimGpu::cluster_of(const CUlaunchConfig& c) {
  for (unsigned i = 0; i < c.numAttrs; ++i)
    if (c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      return {c.attrs[i].value.clusterDim.x, c.attrs[i].value.clusterDim.y,
              c.attrs[i].value.clusterDim.z};
  return {0, 0, 0};
}

CUresult SimGpu::launch_sent_kernel(LaunchKind kind, const CUlaunchConfig& c, CUfunction f,
                                    SentKernelParams params) {
  bool cooperative = kind == LaunchKind::kCooperative;
  if (kind == LaunchKind::kEx) {
    if (c.numAttrs && !c.attrs) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < c.numAttrs; ++i) {
      if (c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c.attrs[i].value.cooperative)
        cooperative = true;
    }
  }
  void** kp = params.pointers.empty() ? nullptr : const_cast<void**>(params.pointers.data());
  const ptx::Dim3 cluster = kind == LaunchKind::kEx ? cluster_of(c) : ptx::Dim3{0, 0, 0};
  return launch(f, {c.gridDimX, c.gridDimY, c.gridDimZ}, {c.blockDimX, c.blockDimY, c.blockDimZ},
                c.sharedMemBytes, c.hStream, kp, nullptr, cooperative, cluster, &params);
}

// ---------------------------------------------------------------------------------------------
// Occupancy: the usual per-SM limits (threads, blocks, registers, shared memory) of the profile.

CUresult SimGpu::occupancy_blocks(int* blocks, const KernelDesc& d, const FuncSettings& s,
                                  int block_size, size_t dynamic_shared) {
  int max_threads = 1024;
  int fattr = 0;
  if (get_func_attribute(&fattr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d, s) == CUDA_SUCCESS)
    max_threads = fattr;
  if (block_size <= 0 || block_size > max_threads) {
    *blocks = 0;
    return CUDA_SUCCESS;
  }
  int warps = (block_size + 31) / 32;
  int n = std::min(profile_.blocks_per_sm, profile_.threads_per_sm / (warps * 32));
  if (d.num_regs) {
    int per_warp = static_cast<int>((d.num_regs * 32 + 255) / 256 * 256);
    n = std::min(n, kRegsPerSm / (per_warp * warps));
  }
  size_t smem = dynamic_shared + d.static_shared;
  if (smem > static_cast<size_t>(profile_.shared_per_block_optin)) {
    n = 0;
  } else if (smem > 0) {
    n = std::min<int>(n, static_cast<int>(profile_.shared_per_sm / ((smem + 255) / 256 * 256)));
  }
  *blocks = std::max(n, 0);
  return CUDA_SUCCESS;
}

// Clusters: the sim has no GPCs, so a cluster may span any SMs; the portable limit of 8 blocks
// applies (the non-portable 16 is not offered).
CUresult SimGpu::cuOccupancyMaxPotentialClusterSize(int* out, CUfunction h,
                                                    const CUlaunchConfig* c) {
  if (!out || !c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
  if (profile_.arch() < 90) return CUDA_ERROR_NOT_SUPPORTED;
  const uint64_t threads = uint64_t{c->blockDimX} * c->blockDimY * c->blockDimZ;
  if (threads == 0 || threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  int per_sm = 0;
  if (CUresult e = cuOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, h, static_cast<int>(threads), c->sharedMemBytes))
    return e;
  const uint64_t fits = uint64_t(per_sm) * static_cast<uint64_t>(options_.sm_count);
  *out = static_cast<int>(std::min<uint64_t>(8, fits));
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuOccupancyMaxActiveClusters(int* out, CUfunction h, const CUlaunchConfig* c) {
  if (!out || !c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
  if (profile_.arch() < 90) return CUDA_ERROR_NOT_SUPPORTED;
  ptx::Dim3 cluster = cluster_of(*c);
  if (!cluster.x) {  // the kernel's __cluster_dims__
    CtxPtr ctx;
    Function* f = nullptr;
    if (CUresult e = function_of(h, &ctx, &f)) return e;
    std::shared_lock lock(mu_);
    cluster = f->desc->cluster;
  }
  const uint64_t size = uint64_t{cluster.x} * cluster.y * cluster.z;
  if (size == 0 || size > 8) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  const uint64_t threads = uint64_t{c->blockDimX} * c->blockDimY * c->blockDimZ;
  if (threads == 0 || threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  int per_sm = 0;
  if (CUresult e = cuOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, h, static_cast<int>(threads), c->sharedMemBytes))
    return e;
  *out = static_cast<int>(uint64_t(per_sm) * static_cast<uint64_t>(options_.sm_count) / size);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int bs,
                                                             size_t dyn) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, bs, dyn, 0);
}

CUresult SimGpu::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, CUfunction h, int bs,
                                                                      size_t dyn, unsigned flags) {
  if (!n || (flags & ~unsigned{CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE}))
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  std::shared_lock lock(mu_);
  return occupancy_blocks(n, *f->desc, settings_of(h, *f), bs, dyn);
}

CUresult SimGpu::cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block, CUfunction f,
                                                  CUoccupancyB2DSize b2d, size_t dyn, int limit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block, f, b2d, dyn, limit, 0);
}

CUresult SimGpu::cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid, int* block, CUfunction h,
                                                           CUoccupancyB2DSize b2d, size_t dyn,
                                                           int limit, unsigned flags) {
  if (!min_grid || !block || (flags & ~unsigned{CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE}))
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  KernelDesc d;
  FuncSettings s;
  uint32_t sms = 0;  // of the function's context: a green context's partition
  {
    std::shared_lock lock(mu_);
    d = *f->desc;
    s = settings_of(h, *f);
    sms = sms_of(*f->module->ctx);
  }
  int max_threads = 1024;
  get_func_attribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d, s);
  if (limit > 0) max_threads = std::min(max_threads, limit);
  int best_block = 0, best_blocks = 0, best_threads = 0;
  // Largest block size first, so ties go to the larger block, as in the CUDA occupancy API.
  for (int bs = max_threads / 32 * 32; bs > 0; bs -= 32) {
    size_t smem = b2d ? b2d(bs) : dyn;
    int n = 0;
    occupancy_blocks(&n, d, s, bs, smem);
    if (n * bs > best_threads) {
      best_threads = n * bs;
      best_block = bs;
      best_blocks = n;
    }
  }
  *block = best_block;
  *min_grid = best_blocks * static_cast<int>(sms);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuOccupancyAvailableDynamicSMemPerBlock(size_t* out, CUfunction h, int blocks,
                                                         int block_size) {
  if (!out || blocks <= 0 || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  std::shared_lock lock(mu_);
  const KernelDesc& d = *f->desc;
  int fit = 0;
  occupancy_blocks(&fit, d, settings_of(h, *f), block_size, 0);
  if (fit < blocks) {
    *out = 0;
    return CUDA_SUCCESS;
  }
  size_t per_block = static_cast<size_t>(profile_.shared_per_sm / blocks) / 256 * 256;
  size_t cap = profile_.shared_per_block_optin;
  per_block = std::min(per_block, cap);
  *out = per_block > d.static_shared ? per_block - d.static_shared : 0;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
