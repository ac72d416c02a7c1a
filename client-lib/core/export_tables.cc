// cuGetExportTable: the driver's undocumented tables that cudart (static and shared) and cuBLAS
// ask for by UUID. Slot meanings are public knowledge from ZLUDA's dark_api and other public
// reverse-engineering notes (facts only), checked against what the callers do next:
//   CUDART_INTERFACE 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9
//     [1] module from fatbin wrapper (CUmodule*, wrapper)  [2] primary context of a device
//     without retaining it or making it current (CUcontext*, CUdevice)  [6] module from wrapper
//     (CUmodule*, wrapper, p, p, u32)  [7] no-op  [8] module from fatbin (fatbin, CUmodule*, p,
//     p, u32)  [12] load compilers (success is enough)
//   TOOLS_TLS 42d85a81-23f6-cb47-8298-f6e78a3aecdc: [2] the calling thread's current context
//     (CUcontext*; NULL when none). cuBLASLt 13 calls it before each kernel launch; on failure
//     the call returns CUBLAS_STATUS_NOT_SUPPORTED.
//   TOOLS_CONTEXT 21318c60-9714-3248-8ca6-41ff7324c8f2 (CU_ETID_ToolsContext; a size header
//     and 94 slots, as 13.x drivers serve it): [4] the context's process-unique number
//     (CUcontext, u64*), as cuCtxGetId. cuBLASLt keys its per-context kernel registrations by
//     it, right after TOOLS_TLS[2]. [51] and [39]: see context_object below (cuBLAS on 12.x).
//   FUNCTION_INFO 6e163fbe-b958-444d-835c-e182aff1991e: [7] calls back with each function of a
//     module and returns their count (cuFFT takes its kernels' handles this way).
//   TOOLS_RUNTIME_CALLBACK_HOOKS a094798c-2e74-2e74-93f2-0800200c0a66: [2] and [6] hand out a
//     scratch buffer (pointer, size)
//   CONTEXT_LOCAL_STORAGE c693336e-1121-df11-a8c3-68f355d89593 (no size header): [0] put(ctx,
//     key, value, dtor) [1] delete(ctx, key) [2] get(value*, ctx, key); NULL ctx = current
//   CONTEXT_CHECKS 263e8860-7cd2-6143-92f6-bbd5006dfa7e: [2] check(ctx, u32*, void**) -> 0,
//     [3] () -> 0
//   INTEGRITY_CHECK d4082055-bde6-704b-8d34-ba123c66e1f2: [1] (u32 version, u64 unix seconds,
//     u64 out[2]): HMAC-MD2 over the caller's process, thread, table addresses, time and every
//     device's UUID and PCI location, keyed with a fixed 16-byte key.
// Every slot we do not know answers CUDA_ERROR_NOT_SUPPORTED and logs itself once. The names
// and UUIDs live in export_table_ids.h; tests/gpu/export_tables_probe.cc asks a real driver for
// the same tables (scripts/gpu-check.sh).

#include <cuda.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/export_table_ids.h"
#include "client-lib/core/trace.h"

using namespace cuwire::client;

namespace {

constexpr size_t kSlots = 16;
// TOOLS_CONTEXT is longer: every slot a caller may index exists and fails cleanly.
constexpr size_t kToolsContextSlots = kToolsContextSlotsAfterHeader + 1;
// FUNCTION_INFO's real length is not known here (tests/gpu/export_tables_probe prints it);
// every slot up to 63 exists and fails cleanly except the ones served.
constexpr size_t kFunctionInfoSlots = 64;

void log_once(const std::string& what) {
  static std::mutex mu;
  static std::set<std::string>* said = new std::set<std::string>();
  std::lock_guard lock(mu);
  if (said->insert(what).second) std::fprintf(stderr, "cuwire: %s\n", what.c_str());
}

std::string uuid_text(const CUuuid& u) {
  char buf[40];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(buf, sizeof buf,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return buf;
}

// An unknown slot: any arguments (ignored under the SysV ABI), an error result.
template <int Table, int Slot>
CUresult CUDAAPI unknown_slot() {
  log_once(std::string("export table ") + kExportTables[Table].name + " slot " +
           std::to_string(Slot) + " is not supported");
  return CUDA_ERROR_NOT_SUPPORTED;
}

// CUWIRE_TRACE: a known slot between an entry line (its arguments) and a return line.
template <int Table, int Slot, auto Fn>
struct TracedSlot;
template <int Table, int Slot, typename R, typename... A, R (*Fn)(A...)>
struct TracedSlot<Table, Slot, Fn> {
  static std::string name() {
    return std::string(kExportTables[Table].name) + "[" + std::to_string(Slot) + "]";
  }
  static R CUDAAPI call(A... a) {
    std::string line = "-> " + name() + "(";
    bool first = true;
    ((line += first ? "" : ", ", first = false, trace_value(line, a)), ...);
    trace_write(line + ")");
    trace_depth(1);
    if constexpr (std::is_void_v<R>) {
      Fn(a...);
      trace_depth(-1);
      trace_write("<- " + name());
    } else {
      R r = Fn(a...);
      trace_depth(-1);
      if constexpr (std::is_same_v<R, CUresult>) {
        trace_result(name().c_str(), r);
      } else {
        std::string out = "<- " + name() + " = ";
        trace_value(out, r);
        trace_write(out);
      }
      return r;
    }
  }
};

// What a table holds in slot Slot: Fn, or its tracing wrapper when CUWIRE_TRACE is set.
template <int Table, int Slot, auto Fn>
void* slot() {
  if (g_trace) return reinterpret_cast<void*>(&TracedSlot<Table, Slot, Fn>::call);
  return reinterpret_cast<void*>(Fn);
}

template <int Table, size_t... I>
void fill_unknown(void** t, std::index_sequence<I...>) {
  ((t[I] = reinterpret_cast<void*>(&unknown_slot<Table, static_cast<int>(I)>)), ...);
}

// ---- CUDART_INTERFACE

CUresult CUDAAPI module_from_wrapper(CUmodule* module, const void* wrapper) {
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadData(module, wrapper);  // the image annotation resolves the wrapper
}

CUresult CUDAAPI primary_ctx_of(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult e = primary_context(dev, &id)) return e;
  *pctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(id));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI module_from_wrapper_ext(CUmodule* module, const void* wrapper, void*, void*,
                                         unsigned) {
  return module_from_wrapper(module, wrapper);
}

CUresult CUDAAPI cudart_noop(uintptr_t) { return CUDA_SUCCESS; }

CUresult CUDAAPI module_from_fatbin_ext(const void* fatbin, CUmodule* module, void*, void*,
                                        unsigned) {
  return module_from_wrapper(module, fatbin);
}

CUresult CUDAAPI load_compilers() { return CUDA_SUCCESS; }

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS: scratch buffers the runtime writes into.

alignas(16) uint32_t g_hook_buffer1[1024];
alignas(16) uint32_t g_hook_buffer2[16];

void CUDAAPI hook_buffer1(void** ptr, size_t* size) {
  *ptr = g_hook_buffer1;
  *size = 1024;
}
void CUDAAPI hook_buffer2(void** ptr, size_t* size) {
  *ptr = g_hook_buffer2;
  *size = 14;
}

// ---- CONTEXT_LOCAL_STORAGE, per (context, key). Destructors are not called: contexts of this
// library outlive the runtime that stored the values (they end with the process).

struct LocalStorage {
  std::mutex mu;
  std::map<std::pair<uint64_t, uintptr_t>, void*> values;  // guarded by mu
};
LocalStorage& local_storage() {
  static LocalStorage* s = new LocalStorage();
  return *s;
}

CUresult storage_ctx(CUcontext ctx, uint64_t* id) {
  *id = ctx ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx)) : current_context_id();
  return *id ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cls_put(CUcontext ctx, void* key, void* value, void*) {
  uint64_t id;
  if (CUresult e = storage_ctx(ctx, &id)) return e;
  LocalStorage& s = local_storage();
  std::lock_guard lock(s.mu);
  s.values[{id, reinterpret_cast<uintptr_t>(key)}] = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cls_delete(CUcontext ctx, void* key) {
  uint64_t id;
  if (CUresult e = storage_ctx(ctx, &id)) return e;
  LocalStorage& s = local_storage();
  std::lock_guard lock(s.mu);
  return s.values.erase({id, reinterpret_cast<uintptr_t>(key)}) ? CUDA_SUCCESS
                                                                : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cls_get(void** value, CUcontext ctx, void* key) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id;
  if (CUresult e = storage_ctx(ctx, &id)) return e;
  LocalStorage& s = local_storage();
  std::lock_guard lock(s.mu);
  auto it = s.values.find({id, reinterpret_cast<uintptr_t>(key)});
  if (it == s.values.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = it->second;
  return CUDA_SUCCESS;
}

// ---- CONTEXT_CHECKS

CUresult CUDAAPI context_check(CUcontext, uint32_t* result1, const void** result2) {
  if (result1) *result1 = 0;
  (void)result2;
  return CUDA_SUCCESS;
}
uint32_t CUDAAPI context_check3() { return 0; }

// ---- TOOLS_TLS and TOOLS_CONTEXT

CUresult CUDAAPI thread_context(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(current_context_id()));
  return CUDA_SUCCESS;
}

// cuCtxGetId's answer is cached (a context's number never changes): no round trip per launch.
CUresult CUDAAPI context_number(CUcontext ctx, uint64_t* number) {
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (!number) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long id = 0;
  if (CUresult e = cuCtxGetId(ctx, &id)) return e;
  *number = id;
  return CUDA_SUCCESS;
}

// cuBLAS 13 on compute capability 12.x keys a per-thread kernel cache by what these two give
// for the current context: [51](ctx, u64 kind, void** object, int flag) and then
// [39](ctx, object, u64* number). Their meaning in the driver is not public; what the caller
// does with the answers (compares the number against its cache keys, never dereferences the
// object) is all it needs, so the object is the context itself and its number the context's.
CUresult CUDAAPI context_object(CUcontext ctx, uint64_t, void** object, int) {
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (!object) return CUDA_ERROR_INVALID_VALUE;
  *object = ctx;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI context_object_number(CUcontext ctx, void* object, uint64_t* number) {
  if (!ctx || object != static_cast<void*>(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  return context_number(ctx, number);
}

// ---- FUNCTION_INFO

// [7](ctx, module, callback, opaque, ...): calls callback(opaque, function, module) for each
// function of the module and returns how many there are, 0 on any failure. cuFFT loads each
// of its kernels as a one-function module and takes the handle this way.
uint64_t CUDAAPI module_functions(CUcontext, CUmodule module,
                                  void (*callback)(void*, CUfunction, CUmodule), void* opaque) {
  if (!module || !callback) return 0;
  unsigned count = 0;
  if (cuModuleGetFunctionCount(&count, module) != CUDA_SUCCESS || count == 0) return 0;
  std::vector<CUfunction> functions(count);
  if (cuModuleEnumerateFunctions(functions.data(), count, module) != CUDA_SUCCESS) return 0;
  for (CUfunction f : functions) callback(opaque, f, module);
  return count;
}

// ---- INTEGRITY_CHECK: HMAC (RFC 2104) over MD2 (RFC 1319, with its published erratum).

const uint8_t kMd2S[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20};

class Md2 {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      buf_[len_++] = p[i];
      if (len_ == 16) {
        block(buf_);
        len_ = 0;
      }
    }
  }
  void final(uint8_t out[16]) {
    uint8_t pad = static_cast<uint8_t>(16 - len_);
    uint8_t padding[16];
    std::memset(padding, pad, sizeof padding);
    update(padding, pad);
    uint8_t c[16];
    std::memcpy(c, c_, 16);
    update(c, 16);
    std::memcpy(out, x_, 16);
  }

 private:
  void block(const uint8_t* m) {
    for (int j = 0; j < 16; ++j) {
      x_[16 + j] = m[j];
      x_[32 + j] = static_cast<uint8_t>(x_[16 + j] ^ x_[j]);
    }
    uint8_t t = 0;
    for (int j = 0; j < 18; ++j) {
      for (int k = 0; k < 48; ++k) t = x_[k] ^= kMd2S[t];
      t = static_cast<uint8_t>(t + j);
    }
    uint8_t l = c_[15];
    for (int j = 0; j < 16; ++j) l = c_[j] ^= kMd2S[m[j] ^ l];
  }
  uint8_t x_[48] = {};
  uint8_t c_[16] = {};
  uint8_t buf_[16] = {};
  size_t len_ = 0;
};

constexpr uint8_t kIntegrityKey[16] = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                       0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};

void* g_cudart[kSlots];
void* g_hooks[kSlots];
void* g_cls[kSlots];
void* g_checks[kSlots];
void* g_integrity[kSlots];
void* g_tools_tls[kSlots];
void* g_tools_context[kToolsContextSlots];
void* g_function_info[kFunctionInfoSlots];

CUresult CUDAAPI integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2]) {
  if (!result) return CUDA_ERROR_INVALID_VALUE;
  if (version % 10 == 0) {
    result[0] = 0x3341181C03CB675Cull;
    result[1] = 0x8ED383AA1F4CD1E8ull;
    return CUDA_SUCCESS;
  }
  if (version % 10 == 1) {
    result[0] = 0x1841181C03CB675Cull;
    result[1] = 0x8ED383AA1F4CD1E8ull;
    return CUDA_SUCCESS;
  }
  struct {
    uint32_t driver_version;
    uint32_t version;
    uint32_t process;
    uint32_t thread;
    const void* cudart_table;
    const void* integrity_table;
    const void* fn;
    uint64_t unix_seconds;
  } msg{};
  static_assert(sizeof msg == 48);
  cuDriverGetVersion(reinterpret_cast<int*>(&msg.driver_version));
  msg.version = version;
  msg.process = static_cast<uint32_t>(getpid());
  msg.thread = static_cast<uint32_t>(pthread_self());
  msg.cudart_table = g_cudart;
  msg.integrity_table = g_integrity;
  msg.fn = g_integrity[1];  // what the caller found in the table (a tracing wrapper too)
  msg.unix_seconds = unix_seconds;
  uint8_t k[16];
  for (int i = 0; i < 16; ++i) k[i] = kIntegrityKey[i] ^ 0x36;
  Md2 inner;
  inner.update(k, 16);
  inner.update(&msg, sizeof msg);
  int count = 0;
  if (CUresult e = cuDeviceGetCount(&count)) return e;
  for (int d = 0; d < count; ++d) {
    struct {
      CUuuid uuid;
      int32_t domain, bus, device;
    } info{};
    static_assert(sizeof info == 28);
    if (CUresult e = cuDeviceGetUuid_v2(&info.uuid, d)) return e;
    cuDeviceGetAttribute(&info.domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
    cuDeviceGetAttribute(&info.bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
    cuDeviceGetAttribute(&info.device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
    inner.update(&info, sizeof info);
  }
  uint8_t ih[16];
  inner.final(ih);
  for (int i = 0; i < 16; ++i) k[i] = kIntegrityKey[i] ^ 0x5c;
  Md2 outer;
  outer.update(k, 16);
  outer.update(ih, 16);
  uint8_t oh[16];
  outer.final(oh);
  std::memcpy(result, oh, 16);
  return CUDA_SUCCESS;
}

void* size_of(size_t slots) { return reinterpret_cast<void*>(slots * sizeof(void*)); }

// A slot a table serves: its index and function.
template <int Slot, auto Fn>
struct Served {};

// Table t of export table Table: every slot fails cleanly but the served ones; slot 0 holds the
// table's size (`size_slots` slots) unless that is 0 (CONTEXT_LOCAL_STORAGE serves slot 0).
template <int Table, size_t N, int... Slot, auto... Fn>
void fill_table(void* (&t)[N], size_t size_slots, Served<Slot, Fn>...) {
  fill_unknown<Table>(t, std::make_index_sequence<N>());
  if (size_slots) t[0] = size_of(size_slots);
  ((t[Slot] = slot<Table, Slot, Fn>()), ...);
}

void build_tables() {
  fill_table<kCudartInterface>(g_cudart, 13, Served<1, &module_from_wrapper>(),
                               Served<2, &primary_ctx_of>(), Served<6, &module_from_wrapper_ext>(),
                               Served<7, &cudart_noop>(), Served<8, &module_from_fatbin_ext>(),
                               Served<12, &load_compilers>());
  fill_table<kToolsRuntimeCallbackHooks>(g_hooks, 7, Served<2, &hook_buffer1>(),
                                         Served<6, &hook_buffer2>());
  fill_table<kContextLocalStorage>(g_cls, 0, Served<0, &cls_put>(), Served<1, &cls_delete>(),
                                   Served<2, &cls_get>());
  fill_table<kContextChecks>(g_checks, 4, Served<2, &context_check>(),
                             Served<3, &context_check3>());
  fill_table<kIntegrityCheck>(g_integrity, 3, Served<1, &integrity_check>());
  fill_table<kToolsTls>(g_tools_tls, 4, Served<2, &thread_context>());
  fill_table<kToolsContext>(g_tools_context, kToolsContextSlots, Served<4, &context_number>(),
                            Served<39, &context_object_number>(), Served<51, &context_object>());
  fill_table<kFunctionInfo>(g_function_info, kFunctionInfoSlots, Served<7, &module_functions>());
}

// Indexed by ExportTable, like kExportTables.
void** const kTableSlots[] = {g_cudart,    g_hooks,     g_cls,           g_checks,
                              g_integrity, g_tools_tls, g_tools_context, g_function_info};
static_assert(std::size(kTableSlots) == kExportTableCount);

}  // namespace

extern "C" CUresult CUDAAPI cuGetExportTable(const void** ppExportTable,
                                             const CUuuid* pExportTableId) {
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  static std::once_flag once;
  std::call_once(once, build_tables);
  *ppExportTable = nullptr;
  std::string id = uuid_text(*pExportTableId);
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  bool known = false;
  for (int t = 0; t < kExportTableCount; ++t) {
    if (id == kExportTables[t].uuid) {
      *ppExportTable = kTableSlots[t];
      rc = CUDA_SUCCESS;
      known = true;
    }
  }
  for (const char* q : kQuietlyAbsentTables) known = known || id == q;
  if (!known) {
    log_once("unknown driver export table " + id +
             " requested; answering CUDA_ERROR_NOT_SUPPORTED");
  }
  if (g_trace) {
    trace_write(
        "-- cuGetExportTable(" + id + ") = " +
        (rc == CUDA_SUCCESS ? std::string("table") : std::string("CUDA_ERROR_NOT_SUPPORTED")));
  }
  return rc;
}
