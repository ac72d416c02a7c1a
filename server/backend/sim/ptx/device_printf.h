// Device-side printf (CUDA's vprintf) formatted on the CPU. Internal to the interpreter.
//
// nvcc lowers printf(fmt, ...) to vprintf(fmt, args): `fmt` is a generic pointer to the format
// string (usually a module .global), `args` a generic pointer to a per-thread local buffer in
// which each argument sits at its natural alignment (int 4 bytes; long, pointers and double 8;
// float is promoted to double, char/short to int). Nothing here ever hands a device pointer to
// the host's printf: each conversion is formatted from a value read through `read`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace cuwire::ptx {

// Reads n bytes at a generic device address into dst; false when the range is not readable.
using DeviceReader = std::function<bool(uint64_t addr, void* dst, size_t n)>;

struct PrintfResult {
  int value = 0;            // what vprintf returns: the number of arguments consumed, or -1
  bool fault = false;       // an unreadable format string, argument buffer or %s string
  uint64_t fault_addr = 0;  // the address that could not be read
};

// Longest %s string and format string read, in bytes; longer ones are cut there.
constexpr size_t kPrintfMaxString = 64 << 10;

// Formats one vprintf call, appending at most `room` bytes to *out (the excess is dropped, as
// when the GPU's printf FIFO is full).
PrintfResult FormatDevicePrintf(const DeviceReader& read, uint64_t fmt, uint64_t args, size_t room,
                                std::string* out);

}  // namespace cuwire::ptx
