#include "server/calls/host_calls.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <random>

#include "protocol/frame.h"
#include "protocol/memory_runs.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "server/calls/copies.h"
#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

// What a backend callback carries: the channel stays alive until the callback has run.
struct Ticket {
  std::shared_ptr<HostCallChannel> channel;
  uint64_t id;
  uint64_t serial;  // the channel's own number for it (ids come from the client)
};

}  // namespace

bool HostCallChannel::attach(ByteStream* stream) {
  std::lock_guard lock(mu_);
  if (stream_ || closed_) return false;
  stream_ = stream;
  return true;
}

bool HostCallChannel::attached() const {
  std::lock_guard lock(mu_);
  return stream_ != nullptr && !closed_;
}

void HostCallChannel::detach() {
  close();
  // A write in progress (its peer not reading) ended with the shutdown close() made; once it
  // has let go of the stream, nobody touches it again.
  std::lock_guard w(write_mu_);
  std::lock_guard lock(mu_);
  stream_ = nullptr;
}

void HostCallChannel::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    asked_.clear();
    writes_.clear();
    if (stream_) stream_->shutdown();
  }
  cv_.notify_all();
}

CUresult HostCallChannel::enqueue(Backend& api, CUstream stream, uint64_t id,
                                  std::vector<HostCallView> views, bool send_bytes) {
  uint64_t serial = 0;
  {
    std::lock_guard lock(mu_);
    if (!stream_ || closed_) return CUDA_ERROR_NOT_PERMITTED;
    if (pending_ >= kMaxPending) return CUDA_ERROR_OUT_OF_MEMORY;
    if (views.size() > kMaxChannelViews - views_held_) return CUDA_ERROR_OUT_OF_MEMORY;
    ++pending_;
    serial = next_serial_++;
    views_held_ += views.size();
    if (!views.empty()) views_[serial] = Views{std::move(views), send_bytes};
  }
  auto* ticket = new Ticket{shared_from_this(), id, serial};
  // cuStreamAddCallback, not cuLaunchHostFunc: its callback runs whatever the stream's status,
  // so every ticket comes back; the client decides from the status what to run.
  const CUresult rc = api.cuStreamAddCallback(stream, &HostCallChannel::trampoline, ticket, 0);
  if (rc != CUDA_SUCCESS) {
    delete ticket;
    {
      std::lock_guard lock(mu_);
      --pending_;
      erase_views_locked(serial);
    }
    cv_.notify_all();
  }
  return rc;
}

void CUDA_CB HostCallChannel::trampoline(CUstream, CUresult status, void* p) {
  std::unique_ptr<Ticket> ticket(static_cast<Ticket*>(p));
  ticket->channel->run(ticket->id, ticket->serial, status);
}

void HostCallChannel::run(uint64_t id, uint64_t serial, CUresult status) {
  // The views stay in views_ (for wait_unused) until the end; only this thread reads them.
  const Views* views = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = views_.find(serial);
    if (it != views_.end()) views = &it->second;
  }
  bool asked = false;
  {
    std::lock_guard w(write_mu_);
    ByteStream* stream = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!closed_ && stream_) {
        stream = stream_;
        asked_.insert(id);
        writes_.erase(id);
      }
    }
    if (stream) {
      HostCallMsg m{id, static_cast<uint32_t>(status)};
      std::vector<uint8_t> msg;
      encode_host_call(m, &msg);
      FrameHeader h;
      h.type = static_cast<uint16_t>(FrameType::kHostCall);
      h.sequence = id;
      // The views' bytes go as they are in device memory, each after its run head.
      std::vector<MemoryRunHead> heads;
      std::vector<std::span<const uint8_t>> bulk;
      if (views && views->send_bytes && status == CUDA_SUCCESS) {
        heads.reserve(views->views.size());
        for (const HostCallView& v : views->views) {
          heads.push_back(MemoryRunHead{v.device, v.bytes});
          bulk.push_back({reinterpret_cast<const uint8_t*>(&heads.back()), sizeof(MemoryRunHead)});
          bulk.push_back({v.host, v.bytes});
        }
      }
      asked = write_frame(*stream, h, msg, bulk).is_ok();
    }
  }
  std::vector<uint8_t> writes;
  if (asked) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || asked_.count(id) == 0; });
    asked_.erase(id);
    if (auto it = writes_.find(id); it != writes_.end() && !closed_) {
      writes = std::move(it->second);
      writes_.erase(it);
    }
  }
  // Before the stream goes on: what the function wrote is device memory for the work after it.
  if (views && !writes.empty() && !apply(views->views, writes)) {
    std::lock_guard lock(mu_);
    uint64_t suppressed = 0;
    if (bad_writes_log_.allow(&suppressed)) {
      spdlog::warn(
          "host function {}: its client sent back bytes outside the memory it may "
          "write, which were dropped ({} such lines suppressed before)",
          id, suppressed);
    }
  }
  {
    std::lock_guard lock(mu_);
    --pending_;
    erase_views_locked(serial);
  }
  cv_.notify_all();
}

void HostCallChannel::erase_views_locked(uint64_t serial) {
  auto it = views_.find(serial);
  if (it == views_.end()) return;
  views_held_ -= it->second.views.size();
  views_.erase(it);
}

bool HostCallChannel::apply(const std::vector<HostCallView>& views,
                            std::span<const uint8_t> writes) {
  // The view holding [p, p + n), or null.
  auto view_of = [&](uint64_t p, uint64_t n) -> const HostCallView* {
    for (const HostCallView& v : views) {
      if (p >= v.device && p - v.device <= v.bytes && n <= v.bytes - (p - v.device)) return &v;
    }
    return nullptr;
  };
  // A run outside every view is dropped (a range the server left out at the enqueue, which the
  // client cannot tell); the others are written.
  bool all = true;
  if (!for_each_memory_run(writes, [&](uint64_t p, std::span<const uint8_t> b) {
        const HostCallView* v = view_of(p, b.size());
        if (!v) {
          all = false;
          return true;
        }
        std::memcpy(v->host + (p - v->device), b.data(), b.size());
        return true;
      })) {
    return false;
  }
  return all;
}

void HostCallChannel::done(uint64_t id, std::vector<uint8_t> writes) {
  {
    std::lock_guard lock(mu_);
    // An id not asked for (a hostile or confused client) changes nothing.
    if (asked_.erase(id) == 0) return;
    if (!writes.empty()) writes_[id] = std::move(writes);
  }
  cv_.notify_all();
}

void HostCallChannel::wait_unused(CUdeviceptr p, size_t n) {
  std::unique_lock lock(mu_);
  auto viewed = [&] {
    for (const auto& [serial, call] : views_) {
      for (const HostCallView& v : call.views) {
        if (v.device < p + n && p < v.device + v.bytes) return true;
      }
    }
    return false;
  };
  // Not released by close(): a callback still inside its views finishes first (promptly, once
  // the channel is closed).
  cv_.wait(lock, [&] { return !viewed(); });
}

std::shared_ptr<HostCallChannel> HostCallRegistry::open(uint64_t session, const Tenant* tenant,
                                                        std::string* key) {
  std::random_device rd;  // the kernel's random source on Linux
  key->resize(kKeyBytes);
  for (size_t i = 0; i < kKeyBytes; i += 4) {
    const uint32_t r = rd();
    for (size_t j = 0; j < 4; ++j) (*key)[i + j] = static_cast<char>(r >> (8 * j));
  }
  auto channel = std::make_shared<HostCallChannel>();
  std::lock_guard lock(mu_);
  entries_[session] = Entry{channel, *key, tenant};
  return channel;
}

void HostCallRegistry::remove(uint64_t session) {
  std::lock_guard lock(mu_);
  entries_.erase(session);
}

std::shared_ptr<HostCallChannel> HostCallRegistry::find(uint64_t session, const std::string& key,
                                                        const Tenant* tenant) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(session);
  if (it == entries_.end() || it->second.tenant != tenant || !secrets_equal(key, it->second.key)) {
    return nullptr;
  }
  return it->second.channel.lock();
}

}  // namespace cuwire::server

// ---- the calls (manifest: server=custom). Both take the stream and the client's id of the
// function (and the views, enqueue_host_call); the client knows which kind it is and what to
// call with the status the HostCall frame brings.

namespace cuwire::server {
namespace {

// Where the server can address [p, p + n) of the session's managed memory: the sim's own
// bytes, or (a real driver, a relay) the managed pointer itself, which the host may access.
// False when it cannot.
bool host_view(SessionContext& cx, CUdeviceptr p, size_t n, HostCallView* v) {
  v->device = p;
  v->bytes = n;
  if (DeviceMemoryIo* io = cx.backend().device_memory_io()) {
    v->host = io->managed_host_view(p, n, &v->keep);
    return v->host != nullptr;
  }
  // Nothing keeps the pointer valid here but the session: only its own allocations, whose free
  // waits for the views (SessionContext::check_free), and only where the host may touch managed
  // memory while kernels run (a relay's is this process's memory: always).
  if (!cx.is_allocated(p, n)) return false;
  unsigned managed = 0;
  if (cx.backend().cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) !=
          CUDA_SUCCESS ||
      !managed) {
    return false;
  }
  if (cx.relay()) {
    v->host = reinterpret_cast<uint8_t*>(p);
    return true;
  }
  CUdevice dev = 0;
  int concurrent = 0;
  if (cx.backend().cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
      cx.backend().cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                                        dev) != CUDA_SUCCESS ||
      !concurrent) {
    return false;
  }
  v->host = reinterpret_cast<uint8_t*>(p);
  return true;
}

// Args: u64 stream id, u64 host-call id; then, when the client tracks managed memory, u32
// flags (1: send the views' bytes with the HostCall), u32 count, count x {u64 device address,
// u64 bytes}: the ranges the function may read and write.
CUresult enqueue_host_call(SessionContext& cx, ArgReader& in) {
  uint64_t stream_id = 0, id = 0;
  if (!in.get(&stream_id) || !in.get(&id)) return in.malformed();
  uint32_t flags = 0, count = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (!in.at_end()) {
    if (!in.get(&flags) || !in.get(&count)) return in.malformed();
    if (count > HostCallChannel::kMaxViews) return CUDA_ERROR_INVALID_VALUE;
    ranges.resize(count);
    for (auto& [p, n] : ranges) {
      if (!in.get(&p) || !in.get(&n)) return in.malformed();
    }
  }
  if (!in.at_end()) return in.malformed();
  if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  HostCallChannel* channel = cx.host_calls();
  if (!channel) return CUDA_ERROR_NOT_PERMITTED;
  std::vector<HostCallView> views;
  uint64_t total = 0;
  for (const auto& [p, n] : ranges) {
    if (n == 0 || n > HostCallChannel::kMaxViewBytes - total) return CUDA_ERROR_INVALID_VALUE;
    total += n;
    // A range that is not the session's (another thread of the app may have freed it since
    // the client looked) or that the server cannot address here (not managed memory) is left
    // out: the function sees the client's mirror of it as the client last synchronised it.
    HostCallView v;
    if (cx.check_range(p, n) == CUDA_SUCCESS && host_view(cx, p, n, &v)) {
      views.push_back(std::move(v));
    }
  }
  return channel->enqueue(cx.backend(), stream, id, std::move(views), flags & 1);
}

}  // namespace

CUresult custom_cuLaunchHostFunc(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  return enqueue_host_call(cx, in);
}

CUresult custom_cuStreamAddCallback(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  return enqueue_host_call(cx, in);
}

}  // namespace cuwire::server
