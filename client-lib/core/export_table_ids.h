// The driver export tables (cuGetExportTable) cuwire's libcuda.so.1 serves, by name and UUID.
// One list for the client library (export_tables.cc, which indexes it by ExportTable) and for
// tests/gpu/export_tables_probe.cc, which asks a real driver for the same tables.
// UUIDs are written as the bytes appear in memory (the order the GUID is written in).
#pragma once

#include <cstddef>

namespace cuwire::client {

enum ExportTable : int {
  kCudartInterface,
  kToolsRuntimeCallbackHooks,
  kContextLocalStorage,
  kContextChecks,
  kIntegrityCheck,
  kToolsTls,
  kToolsContext,
  kFunctionInfo,
  kExportTableCount
};

struct ExportTableId {
  const char* name;
  const char* uuid;
};

// Indexed by ExportTable.
inline constexpr ExportTableId kExportTables[kExportTableCount] = {
    {"CUDART_INTERFACE", "6bd5fb6c-5bf4-e74a-8987-d93912fd9df9"},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS", "a094798c-2e74-2e74-93f2-0800200c0a66"},
    {"CONTEXT_LOCAL_STORAGE", "c693336e-1121-df11-a8c3-68f355d89593"},
    {"CONTEXT_CHECKS", "263e8860-7cd2-6143-92f6-bbd5006dfa7e"},
    {"INTEGRITY_CHECK", "d4082055-bde6-704b-8d34-ba123c66e1f2"},
    {"TOOLS_TLS", "42d85a81-23f6-cb47-8298-f6e78a3aecdc"},
    {"TOOLS_CONTEXT", "21318c60-9714-3248-8ca6-41ff7324c8f2"},
    {"FUNCTION_INFO", "6e163fbe-b958-444d-835c-e182aff1991e"},
};

// Slots of TOOLS_CONTEXT after its size header: what 13.x drivers serve, and what the client
// library fills (each unknown one failing cleanly).
inline constexpr size_t kToolsContextSlotsAfterHeader = 94;

// Asked for by cudart, which goes on without it: refused without a log line.
inline constexpr const char* kQuietlyAbsentTables[] = {"f8cff951-2146-8b4e-b9e2-fb469e7c0dd9"};

}  // namespace cuwire::client
