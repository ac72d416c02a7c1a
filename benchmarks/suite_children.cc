// bench_suite's measuring subcommands, each run as a child process: `raw-server` and the raw
// baselines (`raw ...`: ping-pongs, streams, memcpy, frames), and the measurements through the
// client library (`client ...`: latency, launches, copies, scaling, frame sizes).

#include <cuda.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "benchmarks/suite_common.h"

namespace cuwire::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// The raw baselines: `raw-server` and the `raw ...` clients. A connection opens with a
// RawSetup naming what it does until it closes.

constexpr uint32_t kRawMagic = 0x42575243;  // "CRWB"

enum class RawMode : uint32_t {
  kPingBlocking = 1,  // request_bytes in, reply_bytes out, blocking reads and writes
  kPingSpinning = 2,  // the same, both directions polled with MSG_DONTWAIT
  kStreamUp = 3,      // u64 n, then n bytes in; u64 n out
  kStreamDown = 4,    // u64 n in; n bytes out
  kFrames = 5,        // u64 count in, then count frames of request_bytes each; u64 count out
};

struct RawSetup {
  uint32_t magic = kRawMagic;
  uint32_t mode = 0;
  uint64_t request_bytes = 0;
  uint64_t reply_bytes = 0;
};
static_assert(sizeof(RawSetup) == 24);

// A buffer the server reads into or writes from, as a device allocation would be: as large as
// the transfer, faulted in once.
class StreamBuffer {
 public:
  uint8_t* at_least(uint64_t n) {
    if (n > size_) {
      buffer_ = std::make_unique<uint8_t[]>(n);  // value-initialised: every page touched
      size_ = n;
    }
    return buffer_.get();
  }

 private:
  std::unique_ptr<uint8_t[]> buffer_;
  uint64_t size_ = 0;
};

void serve_raw(int fd) {
  RawSetup s;
  if (!recv_all(fd, &s, sizeof s) || s.magic != kRawMagic || s.request_bytes > (1u << 20) ||
      s.reply_bytes > (1u << 20)) {
    close(fd);
    return;
  }
  std::vector<uint8_t> request(std::max<uint64_t>(s.request_bytes, 1)),
      reply(std::max<uint64_t>(s.reply_bytes, 1), 7);
  StreamBuffer buffer;
  uint64_t n = 0;
  switch (static_cast<RawMode>(s.mode)) {
    case RawMode::kPingBlocking:
    case RawMode::kPingSpinning: {
      const bool spin = static_cast<RawMode>(s.mode) == RawMode::kPingSpinning;
      while (recv_all(fd, request.data(), s.request_bytes, spin) &&
             send_all(fd, reply.data(), s.reply_bytes, spin)) {
      }
      break;
    }
    case RawMode::kStreamUp:
      while (recv_all(fd, &n, sizeof n) && recv_all(fd, buffer.at_least(n), n) &&
             send_all(fd, &n, sizeof n)) {
      }
      break;
    case RawMode::kStreamDown:
      while (recv_all(fd, &n, sizeof n) && send_all(fd, buffer.at_least(n), n)) {
      }
      break;
    case RawMode::kFrames:
      while (recv_all(fd, &n, sizeof n)) {
        bool ok = true;
        for (uint64_t i = 0; ok && i < n; ++i) ok = recv_all(fd, request.data(), s.request_bytes);
        if (!ok || !send_all(fd, &n, sizeof n)) break;
      }
      break;
  }
  close(fd);
}

}  // namespace

// raw-server --listen ADDR... --ready-file FILE: serves until killed; writes the bound
// addresses, one a line, to FILE once listening.
int raw_server_main(const Options& o) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<pollfd> listeners;
  std::vector<bool> is_tcp;
  std::string lines;
  for (const std::string& a : o.all("listen")) {
    std::string bound;
    listeners.push_back({listen_at(a, &bound), POLLIN, 0});
    is_tcp.push_back(a.rfind("tcp:", 0) == 0);
    lines += bound + "\n";
  }
  const std::string ready = o.need("ready-file");
  {
    std::ofstream out(ready + ".tmp");
    out << lines;
  }
  std::rename((ready + ".tmp").c_str(), ready.c_str());
  for (;;) {
    if (poll(listeners.data(), listeners.size(), -1) < 0) {
      if (errno == EINTR) continue;
      die(errno_text("poll"));
    }
    for (size_t i = 0; i < listeners.size(); ++i) {
      if (!(listeners[i].revents & POLLIN)) continue;
      const int fd = accept4(listeners[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (is_tcp[i]) set_nodelay(fd);
      std::thread(serve_raw, fd).detach();
    }
  }
}

namespace {

// A scale child's timed part: after the start barrier (--ready-fd, --start-fd), `call` back to
// back for --seconds, each call's latency written to --samples.
template <typename Call>
json time_calls(const Options& o, Call&& call) {
  start_barrier(static_cast<int>(o.num("ready-fd")), static_cast<int>(o.num("start-fd")));
  std::vector<uint32_t> samples;
  samples.reserve(1 << 20);
  const uint64_t start = now_ns(), end = start + static_cast<uint64_t>(o.real("seconds") * 1e9);
  uint64_t t = start;
  while (t < end) {
    call();
    const uint64_t t1 = now_ns();
    samples.push_back(saturate_ns(t1 - t));
    t = t1;
  }
  write_samples(o.need("samples"), samples);
  return {{"calls", samples.size()}, {"seconds", static_cast<double>(t - start) * 1e-9}};
}

int raw_connect(const std::string& server, RawMode mode, uint64_t request, uint64_t reply) {
  const int fd = connect_to(server);
  RawSetup s;
  s.mode = static_cast<uint32_t>(mode);
  s.request_bytes = request;
  s.reply_bytes = reply;
  if (!send_all(fd, &s, sizeof s)) die(errno_text("raw setup"));
  return fd;
}

// raw ping --server A --mode blocking|spinning --request B --reply B --iters N --warmup W
json raw_ping(const Options& o) {
  const bool spin = o.need("mode") == "spinning";
  const uint64_t req = o.num("request"), rep = o.num("reply");
  const int fd = raw_connect(o.need("server"),
                             spin ? RawMode::kPingSpinning : RawMode::kPingBlocking, req, rep);
  std::vector<uint8_t> out(req, 1), in(rep);
  auto once = [&] {
    if (!send_all(fd, out.data(), req, spin) || !recv_all(fd, in.data(), rep, spin)) {
      die(errno_text("raw ping"));
    }
  };
  for (uint64_t i = 0, w = o.num("warmup"); i < w; ++i) once();
  std::vector<double> ns(o.num("iters"));
  for (double& v : ns) {
    const uint64_t t0 = now_ns();
    once();
    v = static_cast<double>(now_ns() - t0);
  }
  close(fd);
  return latency_result(o, std::move(ns));
}

// raw stream --server A --direction up|down --bytes N --min-seconds S --min-reps R
json raw_stream(const Options& o) {
  const bool up = o.need("direction") == "up";
  const uint64_t n = o.num("bytes");
  HostBuffer buffer;
  if (!buffer.allocate(n, 5))
    return {{"skipped", "cannot map " + size_text(n) + " of host memory"}};
  const int fd =
      raw_connect(o.need("server"), up ? RawMode::kStreamUp : RawMode::kStreamDown, 0, 0);
  auto once = [&] {
    uint64_t ack = 0;
    const bool ok = up ? send_all(fd, &n, sizeof n) && send_all(fd, buffer.data(), n) &&
                             recv_all(fd, &ack, sizeof ack)
                       : send_all(fd, &n, sizeof n) && recv_all(fd, buffer.data(), n);
    if (!ok) die(errno_text("raw stream"));
  };
  auto timed = time_median(once, 1, o.num("min-reps"), o.real("min-seconds"));
  close(fd);
  return bandwidth_point(n, timed);
}

// raw memcpy --bytes N --min-seconds S --min-reps R (no server)
json raw_memcpy(const Options& o) {
  const uint64_t n = o.num("bytes");
  HostBuffer a, b;
  if (!a.allocate(n, 1) || !b.allocate(n, 2)) {
    return {{"skipped", "cannot map twice " + size_text(n) + " of host memory"}};
  }
  auto once = [&] {
    std::memcpy(b.data(), a.data(), n);
    asm volatile("" ::: "memory");
  };
  return bandwidth_point(n, time_median(once, 1, o.num("min-reps"), o.real("min-seconds")));
}

// raw frames --server A --size S --count N --reps R: N sends of S bytes (the loop timed alone,
// as a launch loop is), then the server's acknowledgement of the last.
json raw_frames(const Options& o) {
  const uint64_t size = o.num("size"), count = o.num("count"), reps = o.num("reps");
  const int fd = raw_connect(o.need("server"), RawMode::kFrames, size, 0);
  std::vector<uint8_t> frame(size, 3);
  std::vector<double> loop_ns, total_ns;
  for (uint64_t r = 0; r <= reps; ++r) {  // the first round warms up
    uint64_t ack = 0;
    if (!send_all(fd, &count, sizeof count)) die(errno_text("raw frames"));
    const uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < count; ++i) {
      if (!send_all(fd, frame.data(), size)) die(errno_text("raw frames"));
    }
    const uint64_t t1 = now_ns();
    if (!recv_all(fd, &ack, sizeof ack)) die(errno_text("raw frames ack"));
    const uint64_t t2 = now_ns();
    if (r == 0) continue;
    loop_ns.push_back(static_cast<double>(t1 - t0) / static_cast<double>(count));
    total_ns.push_back(static_cast<double>(t2 - t0) / static_cast<double>(count));
  }
  close(fd);
  return {{"count", count},
          {"reps", reps},
          {"frame_bytes", size},
          {"enqueue_ns", median(loop_ns)},
          {"total_ns", median(total_ns)}};
}

// raw scale --server A --request B --reply B --seconds T --ready-fd F --start-fd F --samples P
json raw_scale(const Options& o) {
  const uint64_t req = o.num("request"), rep = o.num("reply");
  const int fd = raw_connect(o.need("server"), RawMode::kPingBlocking, req, rep);
  std::vector<uint8_t> out(req, 1), in(rep);
  auto once = [&] {
    if (!send_all(fd, out.data(), req) || !recv_all(fd, in.data(), rep))
      die(errno_text("raw ping"));
  };
  once();
  json result = time_calls(o, once);
  close(fd);
  return result;
}

// ---------------------------------------------------------------------------------------------
// The client library, loaded with dlopen (one process per server address: see suite_main.cc).

// Accepted by the sim's PTX interpreter (tests/ptx use the same version and target).
constexpr const char* kEmptyKernelPtx = R"(
.version 8.0
.target sm_75
.address_size 64

.visible .entry empty()
{
  ret;
}
)";

class Library {
 public:
  void load(const std::string& path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) die(std::string("dlopen: ") + dlerror());
    bind(init, "cuInit");
    bind(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    bind(ctx_set_current, "cuCtxSetCurrent");
    bind(ctx_synchronize, "cuCtxSynchronize");
    bind(mem_alloc, "cuMemAlloc_v2");
    bind(mem_free, "cuMemFree_v2");
    bind(mem_get_info, "cuMemGetInfo_v2");
    bind(memcpy_htod, "cuMemcpyHtoD_v2");
    bind(memcpy_dtoh, "cuMemcpyDtoH_v2");
    bind(mem_host_alloc, "cuMemHostAlloc");
    bind(mem_free_host, "cuMemFreeHost");
    bind(module_load_data, "cuModuleLoadData");
    bind(module_get_function, "cuModuleGetFunction");
    bind(launch_kernel, "cuLaunchKernel");
    bind(get_error_name, "cuGetErrorName");
  }

  // cuInit, then device 0's primary context made current.
  void open_context() {
    check(init(0), "cuInit");
    CUcontext ctx = nullptr;
    check(primary_ctx_retain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(ctx_set_current(ctx), "cuCtxSetCurrent");
  }

  void check(CUresult rc, const char* what) const {
    if (rc == CUDA_SUCCESS) return;
    const char* name = nullptr;
    if (get_error_name(rc, &name) != CUDA_SUCCESS || !name) name = "?";
    die(std::string(what) + " failed: " + name + " (" + std::to_string(rc) + ")");
  }

  CUresult (*init)(unsigned) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*mem_free_host)(void*) = nullptr;
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;

 private:
  template <typename F>
  void bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle_, name));
    if (!f) die(std::string("the client library has no ") + name);
  }

  void* handle_ = nullptr;
};

CUfunction load_empty_kernel(const Library& lib) {
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  lib.check(lib.module_load_data(&module, kEmptyKernelPtx), "cuModuleLoadData");
  lib.check(lib.module_get_function(&f, module, "empty"), "cuModuleGetFunction");
  return f;
}

void launch_empty(const Library& lib, CUfunction f) {
  lib.check(lib.launch_kernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
}

// client latency --iters N --warmup W: 4-byte cuMemcpyDtoH_v2, one at a time.
json client_latency(const Library& lib, const Options& o) {
  CUdeviceptr d = 0;
  lib.check(lib.mem_alloc(&d, 4), "cuMemAlloc");
  uint32_t host = 0;
  lib.check(lib.memcpy_htod(d, &host, 4), "cuMemcpyHtoD");
  for (uint64_t i = 0, w = o.num("warmup"); i < w; ++i) {
    lib.check(lib.memcpy_dtoh(&host, d, 4), "cuMemcpyDtoH");
  }
  std::vector<double> ns(o.num("iters"));
  for (double& v : ns) {
    const uint64_t t0 = now_ns();
    const CUresult rc = lib.memcpy_dtoh(&host, d, 4);
    v = static_cast<double>(now_ns() - t0);
    lib.check(rc, "cuMemcpyDtoH");
  }
  return latency_result(o, std::move(ns));
}

// client launch --count N --reps R: N launches of the empty kernel timed alone (enqueue) and
// with the cuCtxSynchronize after them; medians over R rounds, after one round of warm-up.
json client_launch(const Library& lib, const Options& o) {
  const CUfunction f = load_empty_kernel(lib);
  const uint64_t count = o.num("count"), reps = o.num("reps");
  std::vector<double> loop_ns, total_ns;
  for (uint64_t r = 0; r <= reps; ++r) {
    const uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < count; ++i) launch_empty(lib, f);
    const uint64_t t1 = now_ns();
    lib.check(lib.ctx_synchronize(), "cuCtxSynchronize");
    const uint64_t t2 = now_ns();
    if (r == 0) continue;
    loop_ns.push_back(static_cast<double>(t1 - t0) / static_cast<double>(count));
    total_ns.push_back(static_cast<double>(t2 - t0) / static_cast<double>(count));
  }
  return {{"count", count},
          {"reps", reps},
          {"enqueue_ns", median(loop_ns)},
          {"total_ns", median(total_ns)},
          {"enqueue_ns_rounds", loop_ns},
          {"total_ns_rounds", total_ns}};
}

// client copy --direction h2d|d2h --host pageable|pinned --bytes N --min-seconds S --min-reps R
json client_copy(const Library& lib, const Options& o) {
  const bool h2d = o.need("direction") == "h2d", pinned = o.need("host") == "pinned";
  const uint64_t n = o.num("bytes");
  HostBuffer pageable;
  uint8_t* host = nullptr;
  if (pinned) {
    void* p = nullptr;
    if (CUresult rc = lib.mem_host_alloc(&p, n, 0); rc == CUDA_ERROR_OUT_OF_MEMORY) {
      return {{"skipped", "cuMemHostAlloc of " + size_text(n) + ": out of memory"}};
    } else {
      lib.check(rc, "cuMemHostAlloc");
    }
    host = static_cast<uint8_t*>(p);
    std::memset(host, 5, n);
  } else {
    if (!pageable.allocate(n, 5))
      return {{"skipped", "cannot map " + size_text(n) + " of host memory"}};
    host = pageable.data();
  }
  CUdeviceptr d = 0;
  if (CUresult rc = lib.mem_alloc(&d, n); rc == CUDA_ERROR_OUT_OF_MEMORY) {
    if (pinned) lib.mem_free_host(host);
    return {{"skipped", "cuMemAlloc of " + size_text(n) + ": out of memory"}};
  } else {
    lib.check(rc, "cuMemAlloc");
  }
  // Device memory written once before anything is timed, so no direction reads untouched pages.
  lib.check(lib.memcpy_htod(d, host, n), "cuMemcpyHtoD");
  auto once = [&] {
    lib.check(h2d ? lib.memcpy_htod(d, host, n) : lib.memcpy_dtoh(host, d, n),
              h2d ? "cuMemcpyHtoD" : "cuMemcpyDtoH");
  };
  // From 64 MiB on, that first copy is warm-up enough (every page of both buffers touched); a
  // 1 GiB copy takes seconds here.
  const int warmup = n >= (64u << 20) ? 0 : 1;
  json point =
      bandwidth_point(n, time_median(once, warmup, o.num("min-reps"), o.real("min-seconds")));
  lib.check(lib.mem_free(d), "cuMemFree");
  if (pinned) lib.check(lib.mem_free_host(host), "cuMemFreeHost");
  return point;
}

// client scale --seconds T --ready-fd F --start-fd F --samples P: cuMemGetInfo_v2 in a loop.
json client_scale(const Library& lib, const Options& o) {
  size_t free = 0, total = 0;
  auto once = [&] { lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo"); };
  once();
  return time_calls(o, once);
}

// ---- frame sizes, taken from the wire

// A unix-socket proxy in this process between the client library and the server, counting the
// bytes each way. A count is taken once a synchronous call has returned: by then the proxy has
// counted its whole request (the server answered it) and its whole reply (the client read it),
// as it counts bytes before passing them on.
class CountingProxy {
 public:
  CountingProxy(const std::string& listen_path, std::string upstream)
      : upstream_(std::move(upstream)) {
    std::string bound;
    listener_ = listen_at("unix:" + listen_path, &bound);
    std::thread([this] { accept_loop(); }).detach();
  }
  uint64_t up() const { return up_.load(); }
  uint64_t down() const { return down_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      const int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = connect_to(upstream_);
      std::thread([=, this] { pump(client, server, &up_); }).detach();
      std::thread([=, this] { pump(server, client, &down_); }).detach();
    }
  }
  static void pump(int from, int to, std::atomic<uint64_t>* counter) {
    std::vector<char> buf(1 << 16);
    for (;;) {
      const ssize_t r = recv(from, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      counter->fetch_add(static_cast<uint64_t>(r));
      if (!send_all(to, buf.data(), static_cast<size_t>(r))) break;
    }
    shutdown(to, SHUT_WR);
  }

  std::string upstream_;
  int listener_ = -1;
  std::atomic<uint64_t> up_{0}, down_{0};
};

// client frames --proxy-socket PATH (CUWIRE_SERVER: the real server): the request and reply
// bytes of one 4-byte cuMemcpyDtoH_v2, one cuMemGetInfo_v2 and one launch of the empty kernel.
[[noreturn]] void client_frames(const Options& o, const std::string& library) {
  const char* server = std::getenv("CUWIRE_SERVER");
  if (!server) die("client frames: CUWIRE_SERVER not set");
  CountingProxy proxy(o.need("proxy-socket"), server);
  setenv("CUWIRE_SERVER", ("unix:" + o.need("proxy-socket")).c_str(), 1);
  Library lib;
  lib.load(library);
  lib.open_context();
  const CUfunction f = load_empty_kernel(lib);
  CUdeviceptr d = 0;
  lib.check(lib.mem_alloc(&d, 4), "cuMemAlloc");
  uint32_t host = 0;
  size_t free = 0, total = 0;
  lib.check(lib.memcpy_dtoh(&host, d, 4), "cuMemcpyDtoH");
  lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo");
  launch_empty(lib, f);
  lib.check(lib.ctx_synchronize(), "cuCtxSynchronize");

  constexpr int kCalls = 64;
  auto per_call = [&](auto&& op) {
    const uint64_t up0 = proxy.up(), down0 = proxy.down();
    for (int i = 0; i < kCalls; ++i) op();
    return std::pair<double, double>{static_cast<double>(proxy.up() - up0) / kCalls,
                                     static_cast<double>(proxy.down() - down0) / kCalls};
  };
  auto dtoh = per_call([&] { lib.check(lib.memcpy_dtoh(&host, d, 4), "cuMemcpyDtoH"); });
  auto info = per_call([&] { lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo"); });
  auto sync = per_call([&] { lib.check(lib.ctx_synchronize(), "cuCtxSynchronize"); });
  // Launches are sent without waiting: counted with a synchronize after them, less its own.
  const uint64_t up0 = proxy.up();
  for (int i = 0; i < kCalls; ++i) launch_empty(lib, f);
  lib.check(lib.ctx_synchronize(), "cuCtxSynchronize");
  const double launch =
      (static_cast<double>(proxy.up() - up0) - sync.first) / static_cast<double>(kCalls);
  json out = {{"dtoh4", {{"request", dtoh.first}, {"reply", dtoh.second}}},
              {"mem_get_info", {{"request", info.first}, {"reply", info.second}}},
              {"ctx_synchronize", {{"request", sync.first}, {"reply", sync.second}}},
              {"launch", {{"request", launch}}}};
  print_json(out);
  std::fflush(nullptr);
  _exit(0);  // the proxy's threads are still blocked in recv
}

}  // namespace

int client_main(const std::string& what, const Options& o, const std::string& library) {
  if (what == "frames") client_frames(o, library);
  Library lib;
  lib.load(library);
  lib.open_context();
  json out;
  if (what == "latency") {
    out = client_latency(lib, o);
  } else if (what == "launch") {
    out = client_launch(lib, o);
  } else if (what == "copy") {
    out = client_copy(lib, o);
  } else if (what == "scale") {
    out = client_scale(lib, o);
  } else {
    die("unknown client measurement " + what);
  }
  print_json(out);
  return 0;
}

int raw_main(const std::string& what, const Options& o) {
  signal(SIGPIPE, SIG_IGN);
  json out;
  if (what == "ping") {
    out = raw_ping(o);
  } else if (what == "stream") {
    out = raw_stream(o);
  } else if (what == "memcpy") {
    out = raw_memcpy(o);
  } else if (what == "frames") {
    out = raw_frames(o);
  } else if (what == "scale") {
    out = raw_scale(o);
  } else {
    die("unknown raw measurement " + what);
  }
  print_json(out);
  return 0;
}

}  // namespace cuwire::bench
