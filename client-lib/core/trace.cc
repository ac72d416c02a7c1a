#include "client-lib/core/trace.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cuwire::client {

bool g_trace = false;

namespace {

FILE* g_out = nullptr;  // stderr; constant-initialised, so set before trace_init runs
thread_local int t_depth = 0;

__attribute__((constructor)) void trace_init() {
  const char* v = std::getenv("CUWIRE_TRACE");
  if (!v || !*v || std::strcmp(v, "0") == 0) return;
  if (std::strcmp(v, "1") != 0 && std::strcmp(v, "stderr") != 0) {
    if (FILE* f = std::fopen(v, "a")) {
      std::setvbuf(f, nullptr, _IOLBF, 0);
      g_out = f;
    }
  }
  g_trace = true;
}

}  // namespace

void trace_write(const std::string& line) {
  static thread_local long tid = syscall(SYS_gettid);
  int depth = t_depth < 0 ? 0 : (t_depth > 16 ? 16 : t_depth);
  // One fprintf per line: lines of different threads do not interleave.
  std::fprintf(g_out ? g_out : stderr, "cuwire trace [%ld] %*s%s\n", tid, 2 * depth, "",
               line.c_str());
}

void trace_depth(int delta) { t_depth += delta; }

void trace_result(const char* name, CUresult rc) {
  const char* text = nullptr;
  if (cuGetErrorName(rc, &text) != CUDA_SUCCESS || !text) text = "?";
  char buf[160];
  std::snprintf(buf, sizeof buf, "<- %s = %s (%d)", name, text, static_cast<int>(rc));
  trace_write(buf);
}

void trace_note(const std::string& line) { trace_write(line); }

}  // namespace cuwire::client
