// Call latency and copy bandwidth through cuwire, each next to its baseline measured in the
// same run:
//   RawRoundTrip/<t>     a bare ping-pong of the same bytes over the same transport
//   ProtocolCall/<t>     a cuwire Call/Reply (cuDeviceGetCount) through gpu-server (sim)
//   LibraryCall          cuMemGetInfo (never cached) through cuwire's libcuda.so.1 (unix socket)
//   HostMemcpy/<bytes>   memcpy in this process
//   RawStream/<bytes>    the bytes pushed over a unix socket and acknowledged
//   LibraryHtoD/<bytes>  cuMemcpyHtoD through libcuda.so.1 into sim device memory
// Compare ProtocolCall against RawRoundTrip (protocol + server overhead per call) and
// LibraryHtoD against RawStream (copy path overhead).

#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "server/session/server.h"

namespace {

using namespace cuwire;

std::string g_dir;

struct Fixture {
  std::unique_ptr<server::Server> server;
  Address unix_addr, tcp_addr;

  Fixture() {
    char tmpl[] = "/tmp/cuwire-bench-XXXXXX";
    g_dir = mkdtemp(tmpl);
    server::ServerConfig cfg;
    Address u, t;
    parse_address("unix:" + g_dir + "/s.sock", &u);
    parse_address("tcp:127.0.0.1:0", &t);
    cfg.listen = {u, t};
    cfg.backend = "sim";
    spdlog::set_level(spdlog::level::warn);
    server = std::make_unique<server::Server>(cfg);
    if (!server->start()) std::abort();
    unix_addr = server->addresses()[0];
    tcp_addr = server->addresses()[1];
    setenv("CUWIRE_SERVER", unix_addr.to_string().c_str(), 1);
  }
};

Fixture& fixture() {
  static Fixture* f = new Fixture();
  return *f;
}

// ---- baselines: an echo server speaking raw bytes

struct Echo {
  std::unique_ptr<Listener> listener;
  std::thread thread;
  explicit Echo(const std::string& addr_text) {
    Address a;
    parse_address(addr_text, &a);
    listen_on(a, {}, &listener);
    thread = std::thread([this] {
      listener->run([](std::unique_ptr<ByteStream> s) {
        std::thread([s = std::move(s)]() mutable {
          uint64_t n = 0;
          std::vector<uint8_t> buf;
          // Protocol: u64 request length, request bytes; answer: u64 reply length + bytes.
          while (s->read_exact(&n, 8)) {
            uint64_t reply = n >> 32;
            n &= 0xffffffff;
            buf.resize(std::max<uint64_t>(n, reply));
            if (!s->read_exact(buf.data(), n)) break;
            std::span<const uint8_t> out[] = {{reinterpret_cast<uint8_t*>(&reply), 8},
                                              {buf.data(), reply}};
            if (!s->write_all(out)) break;
          }
        }).detach();
      });
    });
  }
};

void raw_exchange(ByteStream& s, const std::vector<uint8_t>& req, std::vector<uint8_t>& resp,
                  uint64_t reply_bytes) {
  uint64_t hdr = req.size() | (reply_bytes << 32);
  std::span<const uint8_t> out[] = {{reinterpret_cast<uint8_t*>(&hdr), 8}, req};
  s.write_all(out);
  uint64_t n;
  s.read_exact(&n, 8);
  resp.resize(n);
  s.read_exact(resp.data(), n);
}

void BM_RawRoundTrip(benchmark::State& state) {
  fixture();
  static Echo* unix_echo = new Echo("unix:" + g_dir + "/echo.sock");
  static Echo* tcp_echo = new Echo("tcp:127.0.0.1:0");
  Echo* e = state.range(0) == 0 ? unix_echo : tcp_echo;
  std::unique_ptr<ByteStream> s;
  connect_stream(e->listener->local_address(), {}, &s);
  // Sizes of a cuDeviceGetCount Call and Reply frame.
  std::vector<uint8_t> req(32 + 40), resp;
  for (auto _ : state) raw_exchange(*s, req, resp, 32 + 40);
}
BENCHMARK(BM_RawRoundTrip)->Arg(0)->Arg(1)->ArgName("tcp");

void BM_ProtocolCall(benchmark::State& state) {
  Fixture& f = fixture();
  std::unique_ptr<ByteStream> s;
  connect_stream(state.range(0) == 0 ? f.unix_addr : f.tcp_addr, {}, &s);
  HelloMsg hello;
  hello.manifest_hash = kManifestHash;
  hello.client_name = "bench";
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kHello);
  write_frame(*s, h, msg);
  Frame reply;
  read_frame(*s, FrameLimits{}, &reply);
  uint64_t seq = 1;
  for (auto _ : state) {
    encode_call(static_cast<uint32_t>(CallId::k_cuDeviceGetCount), 0, {}, &msg);
    FrameHeader c;
    c.type = static_cast<uint16_t>(FrameType::kCall);
    c.sequence = ++seq;
    write_frame(*s, c, msg);
    read_frame(*s, FrameLimits{}, &reply);
    ReplyView r;
    decode_reply(reply, &r);
    benchmark::DoNotOptimize(r.result);
  }
}
BENCHMARK(BM_ProtocolCall)->Arg(0)->Arg(1)->ArgName("tcp");

// ---- through the client library

struct Library {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*mem_info)(size_t*, size_t*) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*htod)(CUdeviceptr, const void*, size_t) = nullptr;
  Library() {
    fixture();
    void* h = dlopen(CUWIRE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) std::abort();
    init = reinterpret_cast<decltype(init)>(dlsym(h, "cuInit"));
    mem_info = reinterpret_cast<decltype(mem_info)>(dlsym(h, "cuMemGetInfo_v2"));
    auto retain =
        reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(h, "cuDevicePrimaryCtxRetain"));
    auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(h, "cuCtxSetCurrent"));
    mem_alloc = reinterpret_cast<decltype(mem_alloc)>(dlsym(h, "cuMemAlloc_v2"));
    htod = reinterpret_cast<decltype(htod)>(dlsym(h, "cuMemcpyHtoD_v2"));
    CUcontext ctx = nullptr;
    if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
        set_current(ctx) != CUDA_SUCCESS) {
      std::abort();
    }
  }
};

Library& library() {
  static Library* l = new Library();
  return *l;
}

void BM_LibraryCall(benchmark::State& state) {
  Library& l = library();
  size_t free = 0, total = 0;
  for (auto _ : state) {
    if (l.mem_info(&free, &total) != CUDA_SUCCESS) state.SkipWithError("cuMemGetInfo failed");
    benchmark::DoNotOptimize(free);
  }
}
BENCHMARK(BM_LibraryCall);

void BM_HostMemcpy(benchmark::State& state) {
  size_t n = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> a(n, 1), b(n);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

void BM_RawStream(benchmark::State& state) {
  fixture();
  static Echo* e = new Echo("unix:" + g_dir + "/echo2.sock");
  std::unique_ptr<ByteStream> s;
  connect_stream(e->listener->local_address(), {}, &s);
  size_t n = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> req(n, 1), resp;
  for (auto _ : state) raw_exchange(*s, req, resp, 48);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

void BM_LibraryHtoD(benchmark::State& state) {
  Library& l = library();
  size_t n = static_cast<size_t>(state.range(0));
  CUdeviceptr d = 0;
  if (l.mem_alloc(&d, n) != CUDA_SUCCESS) {
    state.SkipWithError("cuMemAlloc failed");
    return;
  }
  std::vector<uint8_t> src(n, 3);
  for (auto _ : state) {
    if (l.htod(d, src.data(), n) != CUDA_SUCCESS) state.SkipWithError("cuMemcpyHtoD failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

BENCHMARK(BM_HostMemcpy)->Arg(1 << 20)->Arg(16 << 20);
BENCHMARK(BM_RawStream)->Arg(1 << 20)->Arg(16 << 20);
BENCHMARK(BM_LibraryHtoD)->Arg(1 << 20)->Arg(16 << 20);

}  // namespace

BENCHMARK_MAIN();
