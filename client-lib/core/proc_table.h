// The table behind cuGetProcAddress (generated into proc_table.cc): every driver function the
// manifest knows, by the name cuGetProcAddress is asked for.
#pragma once

#include <cstddef>

namespace cuwire::client {

struct ProcEntry {
  const char* name;  // name without version suffix, as cuGetProcAddress is asked
  int since;         // CUDA version that introduced this variant (0: always there)
  void* fn;
  void* fn_ptds;  // the per-thread default stream variant (fn when there is none)
  void* traced;   // fn between CUWIRE_TRACE lines; NULL when fn traces itself (generated)
  void* traced_ptds;
};

extern const ProcEntry kProcTable[];  // sorted by name, then version
extern const size_t kProcTableSize;

}  // namespace cuwire::client
