// The two glibc functions newer than glibc 2.34 that the C++ runtime linked into the client
// libraries asks for (GCC 12's libstdc++ and unwinder, built against Debian 12's glibc 2.36):
// defined here, inside the library, so that it loads where glibc is 2.34 or 2.35 (Ubuntu 22.04,
// where most PyTorch images live). Linked only into the self-contained client libraries
// (client-lib/CMakeLists.txt); the version script keeps both local.
//
// - arc4random (glibc 2.36): std::random_device's default source. Here from getrandom(2).
// - _dl_find_object (glibc 2.35): how the unwinder finds the exception-handling frame of the
//   code a throw passes through. Here from dl_iterate_phdr (what the unwinder used before
//   2.35), with the object's link map from dladdr1.

#include <dlfcn.h>
#include <link.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

extern "C" {

uint32_t arc4random(void) noexcept {
  uint32_t v = 0;
  size_t have = 0;
  while (have < sizeof v) {
    const ssize_t n = getrandom(reinterpret_cast<uint8_t*>(&v) + have, sizeof v - have, 0);
    if (n > 0) {
      have += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      break;  // no entropy source at all: what was read so far (never the case on Linux >= 3.17)
    }
  }
  return v;
}

int _dl_find_object(void* pc, struct dl_find_object* result) noexcept {
  struct Search {
    uintptr_t pc;
    uintptr_t start = 0, end = 0, eh_frame = 0;
    bool found = false;
  } s{reinterpret_cast<uintptr_t>(pc)};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        uintptr_t lo = UINTPTR_MAX, hi = 0, eh = 0;
        bool inside = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& p = info->dlpi_phdr[i];
          const uintptr_t at = info->dlpi_addr + p.p_vaddr;
          if (p.p_type == PT_LOAD) {
            if (at < lo) lo = at;
            if (at + p.p_memsz > hi) hi = at + p.p_memsz;
            if (s->pc >= at && s->pc < at + p.p_memsz) inside = true;
          } else if (p.p_type == PT_GNU_EH_FRAME) {
            eh = at;
          }
        }
        if (!inside) return 0;
        *s = {s->pc, lo, hi, eh, true};
        return 1;
      },
      &s);
  if (!s.found) return -1;
  std::memset(result, 0, sizeof *result);
  result->dlfo_map_start = reinterpret_cast<void*>(s.start);
  result->dlfo_map_end = reinterpret_cast<void*>(s.end);
  result->dlfo_eh_frame = reinterpret_cast<void*>(s.eh_frame);
  Dl_info info;
  struct link_map* map = nullptr;
  if (dladdr1(pc, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0) {
    result->dlfo_link_map = map;
  }
  return 0;
}

}  // extern "C"
