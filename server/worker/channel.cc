#include "server/worker/channel.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "server/worker/worker.capnp.h"

namespace cuwire::server {

namespace {

namespace w = wire::worker;

std::vector<uint8_t> flatten(capnp::MessageBuilder& b) {
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(b);
  const auto bytes = words.asBytes();
  return {bytes.begin(), bytes.end()};
}

void set_caps(w::Caps::Builder b, const ToWorker::Caps& c) {
  b.setMemoryBytes(c.memory_bytes);
  b.setMemoryFraction(c.memory_fraction);
  b.setCompute(c.compute);
}

ToWorker::Caps get_caps(w::Caps::Reader r) {
  return {r.getMemoryBytes(), r.getMemoryFraction(), r.getCompute()};
}

// Decodes `bytes` as one message of `Root`, then `read` it; kMalformed for anything else.
template <typename Root, typename Fn>
Status decode(const std::vector<uint8_t>& bytes, Fn read) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return Status::malformed("a worker-channel packet of " + std::to_string(bytes.size()) +
                             " bytes is not a message");
  }
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = WorkerChannel::kMaxMessage / sizeof(capnp::word) * 2;
    options.nestingLimit = 8;
    capnp::FlatArrayMessageReader reader(words, options);
    return read(reader.getRoot<Root>());
  } catch (const kj::Exception& e) {
    return Status::malformed("a worker-channel message does not decode: " +
                             std::string(e.getDescription().cStr()));
  }
}

}  // namespace

Status WorkerChannel::pair(WorkerChannel* front, int* worker_fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::failed(std::string("socketpair for a worker: ") + std::strerror(errno));
  }
  *front = WorkerChannel(sv[0], /*dont_wait=*/true);
  *worker_fd = sv[1];
  return Status::ok();
}

WorkerChannel::~WorkerChannel() {
  if (fd_ >= 0) close(fd_);
}

WorkerChannel& WorkerChannel::operator=(WorkerChannel&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    dont_wait_ = o.dont_wait_;
    o.fd_ = -1;
  }
  return *this;
}

void WorkerChannel::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status WorkerChannel::send_bytes(const std::vector<uint8_t>& bytes, const std::vector<int>& fds) {
  if (bytes.size() > kMaxMessage || fds.size() > kMaxFds) {
    return Status::too_large("a worker-channel message over its bounds");
  }
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t r;
  do {
    r = sendmsg(fd_, &m, MSG_NOSIGNAL | (dont_wait_ ? MSG_DONTWAIT : 0));
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return Status::rejected("the worker does not read its channel");
  }
  if (r < 0) return Status::disconnected(std::string("worker channel: ") + std::strerror(errno));
  return Status::ok();
}

Status WorkerChannel::receive_bytes(std::vector<uint8_t>* bytes, std::vector<int>* fds,
                                    std::chrono::milliseconds timeout) {
  if (timeout.count() >= 0) {
    pollfd p{fd_, POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return Status::failed("no word on the worker channel within the bound");
  }
  bytes->resize(kMaxMessage);
  iovec iov{bytes->data(), bytes->size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = recvmsg(fd_, &m, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Status::disconnected(std::string("worker channel: ") + std::strerror(errno));
  if (r == 0) return Status::disconnected("worker channel: end of stream");
  bytes->resize(static_cast<size_t>(r));
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (fds && fds->size() < kMaxFds) {
        fds->push_back(got);
      } else {
        close(got);
      }
    }
  }
  if (m.msg_flags & MSG_TRUNC) {
    if (fds) {
      for (int fd : *fds) close(fd);
      fds->clear();
    }
    return Status::malformed("a worker-channel packet over its bounds");
  }
  return Status::ok();
}

Status WorkerChannel::send(const ToWorker& t, const std::vector<int>& fds) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<w::ToWorker>();
  switch (t.kind) {
    case ToWorker::Kind::kInit: {
      const ToWorker::Init& i = t.init;
      auto m = root.initInit();
      m.setDriver(i.driver);
      m.setDevicePrintfToClient(i.device_printf_to_client);
      m.setServerName(i.server_name);
      m.setBackendName(i.backend_name);
      m.setMaxMessageBytes(i.max_message_bytes);
      m.setMaxBulkBytes(i.max_bulk_bytes);
      m.setIdleTimeoutMs(i.idle_timeout_ms);
      m.setReadSpinUs(i.read_spin_us);
      m.setShmLane(i.shm_lane);
      m.setMaxContexts(i.max_contexts);
      m.setMaxStreams(i.max_streams);
      m.setMaxHandles(i.max_handles);
      m.setContextMemory(i.context_memory);
      m.setTenantName(i.tenant_name);
      m.setTenantOpen(i.tenant_open);
      set_caps(m.initCaps(), i.caps);
      m.setSlot(i.slot);
      m.setLabel(i.label);
      m.setLogLevel(i.log_level);
      m.setBorrow(i.borrow);
      auto d = m.initScheduleDevices(static_cast<unsigned>(i.schedule_devices.size()));
      for (size_t k = 0; k < i.schedule_devices.size(); ++k)
        d.set(static_cast<unsigned>(k), i.schedule_devices[k]);
      m.setScheduleRecord(i.schedule_record);
      auto parts = m.initPartitions(static_cast<unsigned>(i.partitions.size()));
      for (size_t k = 0; k < i.partitions.size(); ++k) {
        auto p = parts[static_cast<unsigned>(k)];
        const ToWorker::Init::Partition& q = i.partitions[k];
        p.setDevice(q.device);
        p.setSms(q.sms);
        p.setStep(q.step);
        p.setFirst(q.first);
        p.setCount(q.count);
      }
      break;
    }
    case ToWorker::Kind::kOpen: {
      const ToWorker::Open& o = t.open;
      auto m = root.initOpen();
      m.setId(o.id);
      m.setSequence(o.sequence);
      m.setClient(o.client);
      m.setPid(o.pid);
      m.setPeer(o.peer);
      m.setGpu(o.gpu);
      auto d = m.initDevices(static_cast<unsigned>(o.devices.size()));
      for (size_t k = 0; k < o.devices.size(); ++k) d.set(static_cast<unsigned>(k), o.devices[k]);
      m.setLane(o.lane);
      m.setStats(o.stats);
      break;
    }
    case ToWorker::Kind::kDrain:
      root.setDrain(t.id);
      break;
    case ToWorker::Kind::kEvict:
      root.setEvict(t.id);
      break;
    case ToWorker::Kind::kCaps:
      set_caps(root.initCaps(), t.caps);
      break;
    case ToWorker::Kind::kQuit:
      root.setQuit();
      break;
    case ToWorker::Kind::kPing:
      root.setPing(t.id);
      break;
    case ToWorker::Kind::kHostCalls: {
      const ToWorker::HostCalls& h = t.host_calls;
      auto m = root.initHostCalls();
      m.setId(h.id);
      m.setSequence(h.sequence);
      m.setSession(h.session);
      m.setKey(kj::arrayPtr(reinterpret_cast<const kj::byte*>(h.key.data()), h.key.size()));
      m.setClient(h.client);
      m.setPeer(h.peer);
      break;
    }
  }
  return send_bytes(flatten(b), fds);
}

Status WorkerChannel::send(const FromWorker& f) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<w::FromWorker>();
  switch (f.kind) {
    case FromWorker::Kind::kReady:
      root.setReady(f.error);
      break;
    case FromWorker::Kind::kEnded:
      root.setEnded(f.id);
      break;
    case FromWorker::Kind::kPong:
      root.setPong(f.id);
      break;
  }
  return send_bytes(flatten(b), {});
}

Status WorkerChannel::receive(ToWorker* t, std::vector<int>* fds,
                              std::chrono::milliseconds timeout) {
  std::vector<uint8_t> bytes;
  if (Status s = receive_bytes(&bytes, fds, timeout); !s) return s;
  return decode<w::ToWorker>(bytes, [&](w::ToWorker::Reader r) {
    switch (r.which()) {
      case w::ToWorker::INIT: {
        auto m = r.getInit();
        ToWorker::Init& i = t->init;
        t->kind = ToWorker::Kind::kInit;
        i.driver = m.getDriver();
        i.device_printf_to_client = m.getDevicePrintfToClient();
        i.server_name = m.getServerName();
        i.backend_name = m.getBackendName();
        i.max_message_bytes = m.getMaxMessageBytes();
        i.max_bulk_bytes = m.getMaxBulkBytes();
        i.idle_timeout_ms = m.getIdleTimeoutMs();
        i.read_spin_us = m.getReadSpinUs();
        i.shm_lane = m.getShmLane();
        i.max_contexts = m.getMaxContexts();
        i.max_streams = m.getMaxStreams();
        i.max_handles = m.getMaxHandles();
        i.context_memory = m.getContextMemory();
        i.tenant_name = m.getTenantName();
        i.tenant_open = m.getTenantOpen();
        i.caps = get_caps(m.getCaps());
        i.slot = m.getSlot();
        i.label = m.getLabel();
        i.log_level = m.getLogLevel();
        i.borrow = m.getBorrow();
        i.schedule_devices.clear();
        for (int d : m.getScheduleDevices()) i.schedule_devices.push_back(d);
        i.schedule_record = m.getScheduleRecord();
        i.partitions.clear();
        for (auto p : m.getPartitions()) {
          i.partitions.push_back(
              {p.getDevice(), p.getSms(), p.getStep(), p.getFirst(), p.getCount()});
        }
        return Status::ok();
      }
      case w::ToWorker::OPEN: {
        auto m = r.getOpen();
        ToWorker::Open& o = t->open;
        t->kind = ToWorker::Kind::kOpen;
        o.id = m.getId();
        o.sequence = m.getSequence();
        o.client = m.getClient();
        o.pid = m.getPid();
        o.peer = m.getPeer();
        o.gpu = m.getGpu();
        o.devices.clear();
        for (int d : m.getDevices()) o.devices.push_back(d);
        o.lane = m.getLane();
        o.stats = m.getStats();
        return Status::ok();
      }
      case w::ToWorker::DRAIN:
        t->kind = ToWorker::Kind::kDrain;
        t->id = r.getDrain();
        return Status::ok();
      case w::ToWorker::EVICT:
        t->kind = ToWorker::Kind::kEvict;
        t->id = r.getEvict();
        return Status::ok();
      case w::ToWorker::CAPS:
        t->kind = ToWorker::Kind::kCaps;
        t->caps = get_caps(r.getCaps());
        return Status::ok();
      case w::ToWorker::QUIT:
        t->kind = ToWorker::Kind::kQuit;
        return Status::ok();
      case w::ToWorker::PING:
        t->kind = ToWorker::Kind::kPing;
        t->id = r.getPing();
        return Status::ok();
      case w::ToWorker::HOST_CALLS: {
        auto m = r.getHostCalls();
        ToWorker::HostCalls& h = t->host_calls;
        t->kind = ToWorker::Kind::kHostCalls;
        h.id = m.getId();
        h.sequence = m.getSequence();
        h.session = m.getSession();
        const auto key = m.getKey();
        h.key.assign(reinterpret_cast<const char*>(key.begin()), key.size());
        h.client = m.getClient();
        h.peer = m.getPeer();
        return Status::ok();
      }
    }
    return Status::malformed("a worker-channel message of an unknown kind");
  });
}

Status WorkerChannel::receive(FromWorker* f, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> bytes;
  if (Status s = receive_bytes(&bytes, nullptr, timeout); !s) return s;
  return decode<w::FromWorker>(bytes, [&](w::FromWorker::Reader r) {
    switch (r.which()) {
      case w::FromWorker::READY: {
        f->kind = FromWorker::Kind::kReady;
        // Bounded for the log line it becomes.
        const auto text = r.getReady();
        f->error.assign(text.cStr(), std::min<size_t>(text.size(), 1024));
        return Status::ok();
      }
      case w::FromWorker::ENDED:
        f->kind = FromWorker::Kind::kEnded;
        f->id = r.getEnded();
        return Status::ok();
      case w::FromWorker::PONG:
        f->kind = FromWorker::Kind::kPong;
        f->id = r.getPong();
        return Status::ok();
    }
    return Status::malformed("a worker-channel message of an unknown kind");
  });
}

}  // namespace cuwire::server
