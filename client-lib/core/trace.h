// CUWIRE_TRACE=1: one stderr line when a driver function is entered ("->", with its arguments)
// and one when it returns ("<-", with its result), for every generated stub, for the functions
// cuGetProcAddress hands out (hand-written ones included), for cuGetProcAddress and
// cuGetExportTable themselves and for every export-table slot. CUWIRE_TRACE=FILE appends to
// FILE instead. Off by default; when off a traced function pays one predictable branch.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

namespace cuwire::client {

// Set once, before any driver call can run (a constructor of this library).
extern bool g_trace;

struct TraceStr {  // a const char* argument that is a C string
  const char* s;
};

void trace_write(const std::string& line);  // prefix, thread, depth and newline added
void trace_depth(int delta);

inline void trace_value(std::string& out, TraceStr v) {
  if (!v.s) {
    out += "NULL";
    return;
  }
  out += '"';
  out += v.s;
  out += '"';
}

template <typename T>
void trace_value(std::string& out, const T& v) {
  char buf[48];
  if constexpr (std::is_pointer_v<T>) {
    if (!v) {
      out += "NULL";
      return;
    }
    std::snprintf(buf, sizeof buf, "%p", reinterpret_cast<const void*>(v));
  } else if constexpr (std::is_enum_v<T>) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if constexpr (std::is_integral_v<T>) {
    unsigned long long u = v;
    std::snprintf(buf, sizeof buf, u > 0xffff ? "0x%llx" : "%llu", u);
  } else {
    std::snprintf(buf, sizeof buf, "{%zu bytes}", sizeof(T));
  }
  out += buf;
}

inline void trace_args(std::string&) {}
template <typename T, typename... Rest>
void trace_args(std::string& out, const char* name, const T& v, const Rest&... rest) {
  if (out.back() != '(') out += ", ";
  out += name;
  out += '=';
  trace_value(out, v);
  trace_args(out, rest...);
}

// The line for a result: "<- name = CUDA_ERROR_X (n)".
void trace_result(const char* name, CUresult rc);

// Runs call() between an entry and a return line. args: name, value, name, value ...
template <typename F, typename... A>
CUresult traced(const char* name, F&& call, const A&... args) {
  std::string line = "-> ";
  line += name;
  line += '(';
  trace_args(line, args...);
  line += ')';
  trace_write(line);
  trace_depth(1);
  CUresult rc = call();
  trace_depth(-1);
  trace_result(name, rc);
  return rc;
}

// The same for functions that return something else than CUresult (export-table slots).
void trace_note(const std::string& line);

}  // namespace cuwire::client
