#include "host_calls.h"

#include <random>

#include "dispatch.h"
#include "frame.h"
#include "messages.h"
#include "transport.h"

namespace cuwire::server {
namespace {

// What a backend callback carries: the channel stays alive until the callback has run.
struct Ticket {
  std::shared_ptr<HostCallChannel> channel;
  uint64_t id;
};

}  // namespace

bool HostCallChannel::attach(Stream* stream) {
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
    if (stream_) stream_->shutdown();
  }
  cv_.notify_all();
}

CUresult HostCallChannel::enqueue(DriverApi& api, CUstream stream, uint64_t id) {
  {
    std::lock_guard lock(mu_);
    if (!stream_ || closed_) return CUDA_ERROR_NOT_PERMITTED;
    if (pending_ >= kMaxPending) return CUDA_ERROR_OUT_OF_MEMORY;
    ++pending_;
  }
  auto* ticket = new Ticket{shared_from_this(), id};
  // cuStreamAddCallback, not cuLaunchHostFunc: its callback runs whatever the stream's status,
  // so every ticket comes back; the client decides from the status what to run.
  const CUresult rc = api.cuStreamAddCallback(stream, &HostCallChannel::trampoline, ticket, 0);
  if (rc != CUDA_SUCCESS) {
    delete ticket;
    std::lock_guard lock(mu_);
    --pending_;
  }
  return rc;
}

void CUDA_CB HostCallChannel::trampoline(CUstream, CUresult status, void* p) {
  std::unique_ptr<Ticket> ticket(static_cast<Ticket*>(p));
  ticket->channel->run(ticket->id, status);
}

void HostCallChannel::run(uint64_t id, CUresult status) {
  bool asked = false;
  {
    std::lock_guard w(write_mu_);
    Stream* stream = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!closed_ && stream_) {
        stream = stream_;
        asked_.insert(id);
      }
    }
    if (stream) {
      HostCallMsg m{id, static_cast<uint32_t>(status)};
      std::vector<uint8_t> msg;
      encode_host_call(m, &msg);
      FrameHeader h;
      h.type = static_cast<uint16_t>(FrameType::kHostCall);
      h.sequence = id;
      asked = write_frame(*stream, h, msg).is_ok();
    }
  }
  if (!asked) {
    // No client to run it (or it cannot be told): the stream goes on.
    std::lock_guard lock(mu_);
    asked_.erase(id);
    --pending_;
    return;
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return closed_ || asked_.count(id) == 0; });
  asked_.erase(id);
  --pending_;
}

void HostCallChannel::done(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    // An id not asked for (a hostile or confused client) changes nothing.
    if (asked_.erase(id) == 0) return;
  }
  cv_.notify_all();
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
  if (it == entries_.end() || it->second.tenant != tenant ||
      !secrets_equal(key, it->second.key)) {
    return nullptr;
  }
  return it->second.channel.lock();
}

}  // namespace cuwire::server

// ---- the calls (manifest: server=custom). Both take the stream and the client's id of the
// function (args: u64 stream id, u64 host-call id); the client knows which kind it is and what
// to call with the status the HostCall frame brings.

namespace cuwire::server {
namespace {

CUresult enqueue_host_call(CallContext& cx, ArgReader& in) {
  uint64_t stream_id = 0, id = 0;
  if (!in.get(&stream_id) || !in.get(&id) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  HostCallChannel* channel = cx.host_calls();
  if (!channel) return CUDA_ERROR_NOT_PERMITTED;
  return channel->enqueue(cx.api(), stream, id);
}

}  // namespace

CUresult custom_cuLaunchHostFunc(CallContext& cx, ArgReader& in, ReplyWriter&) {
  return enqueue_host_call(cx, in);
}

CUresult custom_cuStreamAddCallback(CallContext& cx, ArgReader& in, ReplyWriter&) {
  return enqueue_host_call(cx, in);
}

}  // namespace cuwire::server
