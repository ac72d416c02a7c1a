// The driver's export tables (cuGetExportTable) that cuwire's client library serves
// (client-lib/core/export_table_ids.h): asks the libcuda.so.1 in front of it for each and prints,
// per table, whether it has it and its size header where slot 0 holds one (a byte count; a
// table without one starts with a function pointer). Natively that is the NVIDIA driver's
// answer, under `cuwire run` cuwire's; scripts/gpu-check.sh compares the two.
//
// Output, one line per table, then the TOOLS_CONTEXT comparison:
//   NAME UUID present size_header=BYTES slots=N | present no_size_header | absent ERROR

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "client-lib/core/export_table_ids.h"
#include "tests/gpu/driver_symbols.h"

namespace cuwire::gpu_check {
namespace {

// Process addresses start above mmap_min_addr (64 KiB); a size header is far below.
constexpr uintptr_t kMaxSizeHeader = 1 << 16;

bool parse_uuid(const std::string& text, CUuuid* out) {
  std::string hex;
  for (char ch : text) {
    if (ch != '-') hex += ch;
  }
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return false;
  }
  for (size_t i = 0; i < 16; ++i) {
    out->bytes[i] = static_cast<char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return true;
}

// Slots counted by the size header (itself included), 0 when slot 0 is not a size.
size_t ask(const Driver& d, const char* name, const char* uuid) {
  CUuuid id{};
  if (!parse_uuid(uuid, &id)) {
    std::printf("%-28s %s malformed uuid\n", name, uuid);
    return 0;
  }
  const void* table = nullptr;
  CUresult rc = d.cuGetExportTable(&table, &id);
  if (rc != CUDA_SUCCESS || !table) {
    std::printf("%-28s %s absent %s\n", name, uuid, d.error_name(rc).c_str());
    return 0;
  }
  const auto slot0 = reinterpret_cast<uintptr_t>(static_cast<const void* const*>(table)[0]);
  if (slot0 >= kMaxSizeHeader) {
    std::printf("%-28s %s present no_size_header\n", name, uuid);
    return 0;
  }
  std::printf("%-28s %s present size_header=%zu slots=%zu\n", name, uuid,
              static_cast<size_t>(slot0), static_cast<size_t>(slot0) / sizeof(void*));
  return static_cast<size_t>(slot0) / sizeof(void*);
}

int run() {
  Driver d;
  if (!d.load()) return 1;
  int version = 0;
  CUresult rc = d.cuInit(0);
  d.cuDriverGetVersion(&version);
  std::printf("driver %d, cuInit: %s\n", version, d.error_name(rc).c_str());
  size_t tools_context = 0;
  for (int t = 0; t < client::kExportTableCount; ++t) {
    size_t slots = ask(d, client::kExportTables[t].name, client::kExportTables[t].uuid);
    if (t == client::kToolsContext) tools_context = slots;
  }
  for (const char* uuid : client::kQuietlyAbsentTables) ask(d, "(asked-by-cudart)", uuid);
  const size_t assumed = client::kToolsContextSlotsAfterHeader;
  if (tools_context == 0) {
    std::printf("TOOLS_CONTEXT: no size header; cuwire assumes %zu slots after it\n", assumed);
  } else {
    std::printf("TOOLS_CONTEXT: %zu slots after the size header, cuwire assumes %zu: %s\n",
                tools_context - 1, assumed, tools_context - 1 == assumed ? "same" : "DIFFERENT");
  }
  return 0;
}

}  // namespace
}  // namespace cuwire::gpu_check

int main() { return cuwire::gpu_check::run(); }
