// CUresult names and descriptions, generated from cuda.h's documented enum (error_table.cc).
#pragma once

#include <cstddef>

namespace cuwire {

struct ErrorInfo {
  int code;
  const char* name;     // "CUDA_ERROR_INVALID_VALUE"
  const char* message;  // first sentence of cuda.h's description
};

extern const ErrorInfo kErrorTable[];  // sorted by code
extern const size_t kErrorTableSize;

}  // namespace cuwire
