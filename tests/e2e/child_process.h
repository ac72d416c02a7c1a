// Shared by the end-to-end programs that run themselves again as a second client process
// (interprocess memory, events and pools): handles cross to the child as hex on its command
// line, and the parent waits for the child's exit status.
#pragma once
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "tests/e2e/check.h"

extern char** environ;

// The bytes of an opaque handle (a struct whose one member is `reserved`) as hex digits.
template <typename H>
std::string to_hex(const H& h) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < sizeof h.reserved; ++i) {
    snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(h.reserved[i]));
    s += b;
  }
  return s;
}

template <typename H>
H from_hex(const char* s) {
  H h;
  EXPECT(strlen(s) == 2 * sizeof h.reserved, "a handle of %zu hex digits", 2 * sizeof h.reserved);
  for (size_t i = 0; i < sizeof h.reserved; ++i) {
    unsigned v = 0;
    sscanf(s + 2 * i, "%2x", &v);
    h.reserved[i] = static_cast<decltype(+h.reserved[0])>(v);
  }
  return h;
}

// Runs this program again as `self ARGS...` (inheriting its descriptors and environment, so
// the child is a client of the same server) and returns the child's exit status.
inline int run_self(const char* self, const std::vector<std::string>& args) {
  std::vector<char*> argv = {const_cast<char*>(self)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  EXPECT(posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) == 0, "spawn %s", self);
  int status = 0;
  EXPECT(waitpid(pid, &status, 0) == pid, "wait for the child");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
