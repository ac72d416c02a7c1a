#include "protocol/shm_lane.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace cuwire {

namespace {

constexpr uint32_t kLaneMagic = 0x4e4c5743;  // "CWLN"
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kLaneBytes = kHeaderBytes + 2 * ShmLane::kRingBytes;
// At most this much is copied before the other side is told: the two memcpys overlap.
constexpr uint64_t kStep = 512 << 10;

struct alignas(64) RingCounters {
  std::atomic<uint64_t> produced;
  alignas(64) std::atomic<uint64_t> consumed;
  // Bumped (and woken) after every advance of produced / consumed.
  alignas(64) std::atomic<uint32_t> data_seq;
  alignas(64) std::atomic<uint32_t> room_seq;
  // A waiter is (or may be) asleep on data_seq / room_seq: the other side wakes it.
  std::atomic<uint32_t> data_waiters;
  std::atomic<uint32_t> room_waiters;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "shared across processes: the atomics must be lock-free");

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

void wake(std::atomic<uint32_t>* seq, std::atomic<uint32_t>* waiters) {
  seq->fetch_add(1, std::memory_order_release);
  if (waiters->load(std::memory_order_seq_cst) != 0) futex(seq, FUTEX_WAKE, INT32_MAX, nullptr);
}

// Waits until ready() holds: a short spin, then futex sleeps of a few milliseconds between
// which keep_waiting is asked.
template <typename Ready>
Status wait_until(Ready&& ready, std::atomic<uint32_t>* seq, std::atomic<uint32_t>* waiters,
                  const ShmLane::KeepWaiting& keep_waiting) {
  for (int i = 0; i < 2000; ++i) {
    if (ready()) return Status::ok();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  for (;;) {
    const uint32_t seen = seq->load(std::memory_order_acquire);
    waiters->fetch_add(1, std::memory_order_seq_cst);
    if (ready()) {
      waiters->fetch_sub(1, std::memory_order_relaxed);
      return Status::ok();
    }
    const timespec t{0, 5'000'000};
    futex(seq, FUTEX_WAIT, seen, &t);
    waiters->fetch_sub(1, std::memory_order_relaxed);
    if (ready()) return Status::ok();
    if (keep_waiting && !keep_waiting()) return Status::disconnected("the lane's peer is gone");
  }
}

}  // namespace

struct ShmLane::Header {
  uint32_t magic;
  uint32_t reserved;
  uint64_t ring_bytes;
  RingCounters rings[2];  // [0] down, [1] up
};
static_assert(sizeof(ShmLane::Header) <= kHeaderBytes);

struct ShmLane::RingView {
  RingCounters* c;
  uint8_t* data;
};

ShmLane::RingView ShmLane::ring(bool up) {
  auto* h = reinterpret_cast<Header*>(base_);
  return {&h->rings[up ? 1 : 0], base_ + kHeaderBytes + (up ? kRingBytes : 0)};
}

// One end's part of a transfer of n bytes through ring r: steps of at most kStep bytes, each
// waiting until `ready` finds bytes this end may move at *pos (the producer: room the consumer
// freed; the consumer: data produced), handing them to `move`, then publishing the advanced
// *pos and waking the other end.
template <typename Ready, typename Move>
Status ShmLane::step_through_ring(const RingView& r, bool producing, uint64_t* pos, size_t n,
                                  Ready&& ready, const KeepWaiting& keep_waiting, Move&& move) {
  RingCounters& c = *r.c;
  std::atomic<uint64_t>& published = producing ? c.produced : c.consumed;
  std::atomic<uint32_t>* wait_seq = producing ? &c.room_seq : &c.data_seq;
  std::atomic<uint32_t>* wait_waiters = producing ? &c.room_waiters : &c.data_waiters;
  std::atomic<uint32_t>* wake_seq = producing ? &c.data_seq : &c.room_seq;
  std::atomic<uint32_t>* wake_waiters = producing ? &c.data_waiters : &c.room_waiters;
  while (n > 0) {
    uint64_t avail = 0;
    auto has_avail = [&] {
      avail = ready();
      return avail > 0;
    };
    if (Status s = wait_until(has_avail, wait_seq, wait_waiters, keep_waiting); !s) return s;
    const size_t at = static_cast<size_t>(*pos % kRingBytes);
    const size_t len = static_cast<size_t>(std::min<uint64_t>({avail, n, kRingBytes - at, kStep}));
    move(r.data + at, len);
    *pos += len;
    n -= len;
    published.store(*pos, std::memory_order_release);
    wake(wake_seq, wake_waiters);
  }
  return Status::ok();
}

Status ShmLane::create(std::unique_ptr<ShmLane>* out, int* fd_out) {
  const int fd = memfd_create("cuwire-lane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::failed(std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(kLaneBytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    return Status::failed(std::string("lane memfd: ") + std::strerror(e));
  }
  void* p = mmap(nullptr, kLaneBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return Status::failed(std::string("mmap of the lane: ") + std::strerror(e));
  }
  auto* h = new (p) Header{};
  h->magic = kLaneMagic;
  h->ring_bytes = kRingBytes;
  out->reset(new ShmLane(static_cast<uint8_t*>(p), kLaneBytes));
  *fd_out = fd;
  return Status::ok();
}

Status ShmLane::attach(int fd, std::unique_ptr<ShmLane>* out) {
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  // Sealed against shrinking (a file cut under the mapping would fault this process) and of
  // exactly the lane's size.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return Status::invalid_argument("the lane is not a sealable memfd");
  if (!(seals & F_SEAL_SHRINK))
    return Status::invalid_argument("the lane is not sealed against shrinking");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) != kLaneBytes) {
    return Status::invalid_argument("the lane is not " + std::to_string(kLaneBytes) + " bytes");
  }
  void* p = mmap(nullptr, kLaneBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return Status::failed(std::string("mmap of the lane: ") + std::strerror(errno));
  // The header's fixed fields are the client's to write: checked, never relied on after.
  const auto* h = static_cast<const Header*>(p);
  if (h->magic != kLaneMagic || h->ring_bytes != kRingBytes) {
    munmap(p, kLaneBytes);
    return Status::invalid_argument("the lane's header is not cuwire's");
  }
  out->reset(new ShmLane(static_cast<uint8_t*>(p), kLaneBytes));
  return Status::ok();
}

ShmLane::~ShmLane() { munmap(base_, bytes_); }

Status ShmLane::produce(bool up, const void* src, size_t n, const KeepWaiting& keep_waiting,
                        const std::function<void(uint8_t*, size_t)>& fill) {
  RingView r = ring(up);
  uint64_t& produced = produced_[up ? 1 : 0];
  const auto* from = static_cast<const uint8_t*>(src);
  // Room: what the consumer has freed, as far as the ring can hold.
  auto room = [&]() -> uint64_t {
    const uint64_t consumed = r.c->consumed.load(std::memory_order_acquire);
    const uint64_t used = produced - std::min(consumed, produced);
    return used >= kRingBytes ? 0 : kRingBytes - used;
  };
  auto write_piece = [&](uint8_t* at, size_t len) {
    if (from) {
      std::memcpy(at, from, len);
      from += len;
    } else {
      fill(at, len);
    }
  };
  return step_through_ring(r, true, &produced, n, room, keep_waiting, write_piece);
}

Status ShmLane::consume(bool up, void* dst, size_t n, const KeepWaiting& keep_waiting,
                        const std::function<void(const uint8_t*, size_t)>& take) {
  RingView r = ring(up);
  uint64_t& consumed = consumed_[up ? 1 : 0];
  auto* to = static_cast<uint8_t*>(dst);
  auto data = [&]() -> uint64_t {
    const uint64_t produced = r.c->produced.load(std::memory_order_acquire);
    return produced > consumed ? std::min<uint64_t>(produced - consumed, kRingBytes) : 0;
  };
  auto read_piece = [&](uint8_t* at, size_t len) {
    if (to) {
      std::memcpy(to, at, len);
      to += len;
    } else if (take) {
      take(at, len);
    }
  };
  return step_through_ring(r, false, &consumed, n, data, keep_waiting, read_piece);
}

}  // namespace cuwire
