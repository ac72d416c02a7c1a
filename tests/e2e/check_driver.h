// For the end-to-end programs that call the driver API: CU(x) exits non-zero on the first
// failure, naming the line and the driver's error.
#pragma once
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(x)                                                                           \
  do {                                                                                  \
    CUresult r_ = (x);                                                                  \
    if (r_ != CUDA_SUCCESS) {                                                           \
      const char* n_ = nullptr;                                                         \
      cuGetErrorName(r_, &n_);                                                          \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, n_ ? n_ : "?"); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)
