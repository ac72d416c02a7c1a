// JIT linking (cuLinkCreate ... cuLinkDestroy), on the client. The inputs are collected here;
// cuLinkComplete makes one image that cuModuleLoadData and cuLibraryLoadData accept on every
// backend:
//  - one input (PTX, cubin, fatbin, or the fatbin of an object file) is the image as it is,
//    so the cuda backend's driver compiles or loads exactly what the app gave;
//  - several inputs become one PTX module: each input's PTX (a fatbin's newest for the current
//    device), under the newest .version and .target among them, with each `.extern`
//    declaration dropped where another input defines the symbol, and each input's symbols of
//    internal linkage (no .visible / .weak / .extern: printf's `$str` strings, static
//    functions) renamed apart. The sim runs PTX only, so a cubin (SASS) cannot take part in a
//    link of several inputs; a library or object whose members carry no PTX adds nothing.
// The options' log buffers get a line saying what was linked, or why it failed.

#include <cuda.h>
#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/host_access.h"
#include "protocol/image.h"

namespace cuwire::client {
namespace {

struct Unit {
  enum class Kind { kPtx, kCubin, kFatbin } kind;
  std::vector<uint8_t> bytes;  // PTX without its trailing NULs
  std::string name;
  bool from_library = false;  // a library's member: dropped when it holds no PTX
};

struct LinkState {
  char* info_log = nullptr;
  size_t info_size = 0;
  char* error_log = nullptr;
  size_t error_size = 0;
  // The app's option values that CUDA overwrites (log sizes: the bytes written; wall time: a
  // float), which must stay valid while the link state lives.
  void** info_size_out = nullptr;
  void** error_size_out = nullptr;
  void** wall_time_out = nullptr;
  // The wall time's value as the app gave it: programs (NVIDIA's ptxjit among them) pass a
  // float* and read the float, so a writable one is written through as well.
  void* wall_time_given = nullptr;
  std::vector<Unit> units;
  std::vector<uint8_t> output;  // valid until cuLinkDestroy
};

struct LinkTable {
  std::mutex mu;
  std::map<LinkState*, std::unique_ptr<LinkState>> states;  // guarded by mu
};
LinkTable& links() {
  static LinkTable* t = new LinkTable();  // leaked: used by atexit handlers too
  return *t;
}

// The bytes written (the text, as much as fits before its terminating NUL).
size_t write_log(char* buf, size_t size, const std::string& text) {
  if (!buf || size == 0) return 0;
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
  return n;
}

void put_size(void** slot, size_t n) {
  if (slot) *slot = reinterpret_cast<void*>(static_cast<uintptr_t>(n));
}

// The info and error logs, and the output option values with them.
void write_logs(LinkState& s, const std::string& info, const std::string& error) {
  put_size(s.info_size_out, write_log(s.info_log, s.info_size, info));
  put_size(s.error_size_out, write_log(s.error_log, s.error_size, error));
  if (s.wall_time_out) {
    const float ms = 0;  // no compiler ran: the link is a text merge
    if (s.wall_time_given && host_range_ok(s.wall_time_given, sizeof ms, HostAccess::kReadWrite)) {
      std::memcpy(s.wall_time_given, &ms, sizeof ms);
    }
    *s.wall_time_out = nullptr;
    std::memcpy(s.wall_time_out, &ms, sizeof ms);
  }
}

CUresult fail(LinkState& s, CUresult rc, const std::string& why) {
  write_logs(s, "", "cuwire link: " + why);
  return rc;
}

// The options CUDA's linker takes: the log buffers and the wall time are answered, the rest
// (optimisation level, target, cache mode...) have nothing to change on a PTX link.
CUresult read_options(LinkState* s, unsigned n, const CUjit_option* options, void** values) {
  if (n && (!options || !values)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    void* v = values[i];
    switch (options[i]) {
      case CU_JIT_INFO_LOG_BUFFER:
        s->info_log = static_cast<char*>(v);
        break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        s->info_size = static_cast<unsigned>(reinterpret_cast<uintptr_t>(v));
        s->info_size_out = &values[i];
        break;
      case CU_JIT_ERROR_LOG_BUFFER:
        s->error_log = static_cast<char*>(v);
        break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        s->error_size = static_cast<unsigned>(reinterpret_cast<uintptr_t>(v));
        s->error_size_out = &values[i];
        break;
      case CU_JIT_WALL_TIME:
        s->wall_time_out = &values[i];
        s->wall_time_given = v;
        break;
      default:
        if (options[i] >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
        break;
    }
  }
  return CUDA_SUCCESS;
}

// The fatbin section of a host object file (64-bit ELF), where nvcc puts its device code.
bool object_fatbin(std::span<const uint8_t> elf, std::vector<uint8_t>* out) {
  if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0 ||
      elf[EI_CLASS] != ELFCLASS64) {
    return false;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > elf.size() ||
      uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > elf.size() - eh.e_shoff ||
      eh.e_shstrndx >= eh.e_shnum) {
    return false;
  }
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof sh);
    return sh;
  };
  const Elf64_Shdr names = section(eh.e_shstrndx);
  if (names.sh_offset > elf.size() || names.sh_size > elf.size() - names.sh_offset) return false;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    if (sh.sh_name >= names.sh_size || sh.sh_type == SHT_NOBITS) continue;
    const char* name = reinterpret_cast<const char*>(elf.data() + names.sh_offset + sh.sh_name);
    const size_t room = names.sh_size - sh.sh_name;
    if (strnlen(name, room) == room) continue;
    // A linked program's fatbins are in .nv_fatbin; relocatable device code (-dc) puts them
    // in __nv_relfatbin.
    if (std::strcmp(name, ".nv_fatbin") != 0 && std::strcmp(name, "__nv_relfatbin") != 0) continue;
    if (sh.sh_offset > elf.size() || sh.sh_size > elf.size() - sh.sh_offset) return false;
    out->assign(elf.data() + sh.sh_offset, elf.data() + sh.sh_offset + sh.sh_size);
    return true;
  }
  return false;
}

// The device code of an input: PTX, a cubin, a fatbin, or an object or archive of objects
// carrying fatbins (a member without device code adds nothing).
CUresult add_units(LinkState& s, CUjitInputType type, std::span<const uint8_t> data,
                   const std::string& name) {
  switch (type) {
    case CU_JIT_INPUT_PTX: {
      size_t n = data.size();
      while (n && data[n - 1] == 0) --n;
      s.units.push_back(Unit{Unit::Kind::kPtx, {data.begin(), data.begin() + n}, name});
      return CUDA_SUCCESS;
    }
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_FATBINARY: {
      const image::Kind k = image::classify(data);
      if (k == image::Kind::kElf) {
        s.units.push_back(Unit{Unit::Kind::kCubin, {data.begin(), data.end()}, name});
      } else if (k == image::Kind::kFatbin) {
        s.units.push_back(Unit{Unit::Kind::kFatbin, {data.begin(), data.end()}, name});
      } else if (k == image::Kind::kPtx) {
        return add_units(s, CU_JIT_INPUT_PTX, data, name);
      } else {
        return fail(s, CUDA_ERROR_INVALID_IMAGE, name + ": neither a cubin nor a fatbin");
      }
      return CUDA_SUCCESS;
    }
    case CU_JIT_INPUT_OBJECT: {
      std::vector<uint8_t> fatbin;
      if (!object_fatbin(data, &fatbin)) {
        return fail(s, CUDA_ERROR_INVALID_IMAGE, name + ": an object file without device code");
      }
      s.units.push_back(Unit{Unit::Kind::kFatbin, std::move(fatbin), name});
      return CUDA_SUCCESS;
    }
    case CU_JIT_INPUT_LIBRARY: {
      // An ar archive: "!<arch>\n", then members of a 60-byte header and their bytes.
      static const char kMagic[] = "!<arch>\n";
      if (data.size() < 8 || std::memcmp(data.data(), kMagic, 8) != 0) {
        return fail(s, CUDA_ERROR_INVALID_IMAGE, name + ": not an archive");
      }
      size_t at = 8;
      while (at + 60 <= data.size()) {
        char size_text[11] = {};
        std::memcpy(size_text, data.data() + at + 48, 10);
        const unsigned long long size = std::strtoull(size_text, nullptr, 10);
        at += 60;
        if (size > data.size() - at)
          return fail(s, CUDA_ERROR_INVALID_IMAGE, name + ": truncated archive");
        std::vector<uint8_t> fatbin;
        if (object_fatbin(data.subspan(at, size), &fatbin)) {
          Unit u{Unit::Kind::kFatbin, std::move(fatbin), name};
          u.from_library = true;
          s.units.push_back(std::move(u));
        }
        at += size + (size & 1);
      }
      return CUDA_SUCCESS;
    }
    default:
      return fail(
          s, CUDA_ERROR_NOT_SUPPORTED,
          name + ": only PTX, cubin, fatbin, object and library inputs are linked (not NVVM IR)");
  }
}

// ---- one PTX module from several

// Index of the '}' closing the '{' at `open`, or npos.
size_t closing_brace(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string::npos;
}

// Module-scope statements of a PTX text: each a declaration or definition ending in ';' or in
// a function body. Comments are dropped first.
std::vector<std::string> statements(const std::string& ptx) {
  std::string text;
  for (size_t i = 0; i < ptx.size();) {
    if (ptx.compare(i, 2, "//") == 0) {
      while (i < ptx.size() && ptx[i] != '\n') ++i;
    } else if (ptx.compare(i, 2, "/*") == 0) {
      const size_t end = ptx.find("*/", i + 2);
      i = end == std::string::npos ? ptx.size() : end + 2;
      text += ' ';
    } else if (ptx[i] == '"') {  // a string (in a .pragma or .file): kept whole
      const size_t end = ptx.find('"', i + 1);
      const size_t stop = end == std::string::npos ? ptx.size() : end + 1;
      text.append(ptx, i, stop - i);
      i = stop;
    } else {
      text += ptx[i++];
    }
  }
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  auto is_directive_line = [&](size_t from, size_t to) {
    const size_t b = text.find_first_not_of(" \t\r\n", from);
    if (b == std::string::npos || b >= to) return false;
    for (const char* d : {".version", ".target", ".address_size", ".file"}) {
      if (text.compare(b, std::strlen(d), d) == 0) return true;
    }
    return false;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '{') {  // an initialiser (`= {1, 2}`) is part of its statement, not a body
      const size_t prev = text.find_last_not_of(" \t\r\n", i - 1);
      if (i > 0 && prev != std::string::npos && prev >= start &&
          (text[prev] == '=' || text[prev] == ',')) {
        const size_t end = closing_brace(text, i);
        i = end == std::string::npos ? text.size() : end + 1;
        continue;
      }
    }
    if (c == ';' || c == '{') {
      size_t end = i;
      if (c == '{') {
        end = closing_brace(text, i);
        if (end == std::string::npos) end = text.size() - 1;
      }
      out.push_back(text.substr(start, end + 1 - start));
      start = i = end + 1;
      continue;
    }
    if (c == '\n' && is_directive_line(start, i)) {  // ".version 9.0" ends at its line
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
    ++i;
  }
  return out;
}

struct Statement {
  std::string text;
  std::string name;  // the symbol it declares or defines; empty for directives
  bool header = false, is_extern = false, internal = false, definition = false;
};

// The identifiers of a declarator, directives (".global") included: [.]?[A-Za-z_$%][A-Za-z0-9_$]*.
std::vector<std::string> words(const std::string& text) {
  auto first = [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
  };
  auto rest = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    if (text[i] == '.' && i + 1 < text.size() && first(text[i + 1])) ++i;
    if (!first(text[i])) {
      i = start + 1;
      continue;
    }
    ++i;
    while (i < text.size() && rest(text[i])) ++i;
    out.push_back(text.substr(start, i - start));
  }
  return out;
}

Statement classify(std::string text) {
  Statement s;
  const size_t b = text.find_first_not_of(" \t\r\n");
  s.text = b == std::string::npos ? "" : text.substr(b);
  const std::string& t = s.text;
  if (t.rfind(".version", 0) == 0 || t.rfind(".target", 0) == 0 ||
      t.rfind(".address_size", 0) == 0 || t.rfind(".file", 0) == 0) {
    s.header = true;
    return s;
  }
  // The declarator: before a function's parameter list or body, or a variable's initialiser.
  std::string head = t.substr(0, std::min(t.find('{'), t.find('=')));
  size_t kw = head.find(".func");
  size_t kw_len = 5;
  if (kw == std::string::npos) kw = head.find(".entry"), kw_len = 6;
  const bool func = kw != std::string::npos;
  if (func) {
    // `.func (.param .b32 r) name (params)`: the name follows a return list, if any.
    std::string rest = head.substr(kw + kw_len);
    const size_t p = rest.find_first_not_of(" \t\r\n");
    if (p != std::string::npos && rest[p] == '(') {
      const size_t close = rest.find(')', p);
      rest = close == std::string::npos ? "" : rest.substr(close + 1);
    }
    for (const std::string& w : words(rest)) {
      if (w[0] != '.') {
        s.name = w;
        break;
      }
    }
  } else {
    // A variable: the last name before an array bracket, an initialiser or the end.
    const std::string decl = head.substr(0, head.find('['));
    for (const std::string& w : words(decl)) {
      if (w[0] != '.') s.name = w;
    }
  }
  s.is_extern = t.rfind(".extern", 0) == 0;
  s.internal = !s.is_extern && t.rfind(".visible", 0) != 0 && t.rfind(".weak", 0) != 0 &&
               t.rfind(".common", 0) != 0 && !s.name.empty();
  s.definition = !s.is_extern && (!func || t.find('{') != std::string::npos);
  return s;
}

// Replaces whole-symbol occurrences of `from` in `text` (symbols may hold '$' and '%').
std::string rename(const std::string& text, const std::string& from, const std::string& to) {
  std::string out;
  auto is_sym = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
  };
  size_t i = 0;
  while (i < text.size()) {
    const size_t at = text.find(from, i);
    if (at == std::string::npos) break;
    const bool left_ok = at == 0 || (!is_sym(text[at - 1]) && text[at - 1] != '.');
    const bool right_ok = at + from.size() >= text.size() || !is_sym(text[at + from.size()]);
    out.append(text, i, at - i);
    out += left_ok && right_ok ? to : from;
    i = at + from.size();
  }
  out.append(text, i, std::string::npos);
  return out;
}

double number_after(const std::string& s, const char* key) {
  const size_t at = s.find(key);
  return at == std::string::npos ? 0 : std::atof(s.c_str() + at + std::strlen(key));
}

CUresult merge_ptx(LinkState& st, const std::vector<std::string>& modules, std::string* out) {
  std::vector<std::vector<Statement>> parsed;
  std::set<std::string> defined;  // symbols of external linkage some module defines
  double version = 0;
  int target = 0;
  std::string target_line, address_line = ".address_size 64";
  for (const std::string& m : modules) {
    std::vector<Statement> v;
    for (std::string& t : statements(m)) {
      Statement s = classify(std::move(t));
      if (s.text.empty()) continue;
      if (s.header) {
        if (s.text.rfind(".version", 0) == 0)
          version = std::max(version, number_after(s.text, ".version"));
        if (s.text.rfind(".target", 0) == 0) {
          const int sm = static_cast<int>(number_after(s.text, "sm_"));
          if (sm >= target) target = sm, target_line = s.text;
        }
        if (s.text.rfind(".address_size", 0) == 0) address_line = s.text;
        continue;
      }
      if (s.definition && !s.internal && !s.name.empty() && s.text.rfind(".weak", 0) != 0 &&
          !defined.insert(s.name).second) {
        return fail(st, CUDA_ERROR_INVALID_PTX,
                    "symbol " + s.name + " is defined by more than one input");
      }
      v.push_back(std::move(s));
    }
    parsed.push_back(std::move(v));
  }
  if (version == 0 || target_line.empty())
    return fail(st, CUDA_ERROR_INVALID_PTX, "an input has no .version or .target");
  char header[64];
  std::snprintf(header, sizeof header, ".version %.1f\n", version);
  *out = header + target_line + "\n" + address_line + "\n\n";
  std::set<std::string> emitted;  // extern declarations and weak definitions, once each
  for (size_t i = 0; i < parsed.size(); ++i) {
    // This module's internal symbols, renamed apart from every other module's.
    std::vector<std::string> internal;
    for (const Statement& s : parsed[i]) {
      if (s.internal && s.definition) internal.push_back(s.name);
    }
    for (const Statement& s : parsed[i]) {
      if (s.is_extern && defined.count(s.name)) continue;  // an input defines it
      const bool weak = s.definition && s.text.rfind(".weak", 0) == 0;
      if (weak && defined.count(s.name)) continue;  // a strong definition wins
      if ((s.is_extern || weak) &&
          !emitted.insert((s.is_extern ? "extern " : "weak ") + s.name).second)
        continue;
      std::string text = s.text;
      if (i > 0) {
        for (const std::string& n : internal)
          text = rename(text, n, n + "_cuwire_link" + std::to_string(i));
      }
      *out += text + "\n";
    }
    *out += "\n";
  }
  return CUDA_SUCCESS;
}

int current_arch() {
  CUdevice dev = 0;
  int major = 0, minor = 0;
  if (current_device(&dev) != CUDA_SUCCESS ||
      cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) !=
          CUDA_SUCCESS ||
      cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) !=
          CUDA_SUCCESS) {
    return -1;
  }
  return major * 10 + minor;
}

LinkState* state_of(CUlinkState h) {
  LinkTable& t = links();
  std::lock_guard lock(t.mu);
  auto it = t.states.find(reinterpret_cast<LinkState*>(h));
  return it == t.states.end() ? nullptr : it->second.get();
}

}  // namespace
}  // namespace cuwire::client

using namespace cuwire;
using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuLinkCreate_v2(unsigned int numOptions, CUjit_option* options,
                                 void** optionValues, CUlinkState* stateOut) {
  if (!stateOut) return CUDA_ERROR_INVALID_VALUE;
  auto s = std::make_unique<LinkState>();
  if (CUresult e = read_options(s.get(), numOptions, options, optionValues)) return e;
  write_logs(*s, "", "");
  LinkTable& t = links();
  std::lock_guard lock(t.mu);
  *stateOut = reinterpret_cast<CUlinkState>(s.get());
  t.states.emplace(s.get(), std::move(s));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                  const char* name, unsigned int numOptions, CUjit_option* options,
                                  void** optionValues) {
  LinkState* s = state_of(state);
  if (!s || !data) return CUDA_ERROR_INVALID_VALUE;
  if (numOptions && (!options || !optionValues)) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_JIT_INPUT_PTX && size == 0) size = std::strlen(static_cast<const char*>(data)) + 1;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  return add_units(*s, type, {static_cast<const uint8_t*>(data), size}, name ? name : "input");
}

CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path,
                                  unsigned int numOptions, CUjit_option* options,
                                  void** optionValues) {
  LinkState* s = state_of(state);
  if (!s || !path) return CUDA_ERROR_INVALID_VALUE;
  if (numOptions && (!options || !optionValues)) return CUDA_ERROR_INVALID_VALUE;
  FILE* f = std::fopen(path, "rb");
  if (!f) return fail(*s, CUDA_ERROR_FILE_NOT_FOUND, std::string(path) + ": cannot be opened");
  std::vector<uint8_t> bytes;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  if (bytes.empty()) return fail(*s, CUDA_ERROR_INVALID_IMAGE, std::string(path) + ": empty");
  return add_units(*s, type, bytes, path);
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  LinkState* s = state_of(state);
  if (!s || !cubinOut || !sizeOut) return CUDA_ERROR_INVALID_VALUE;
  std::vector<const Unit*> units;
  for (const Unit& u : s->units) units.push_back(&u);
  if (units.size() > 1) {  // library members that hold no PTX take no part
    units.erase(std::remove_if(units.begin(), units.end(),
                               [](const Unit* u) {
                                 std::string ptx, error;
                                 return u->from_library &&
                                        !image::extract_ptx(u->bytes, &ptx, &error);
                               }),
                units.end());
  }
  if (units.empty()) return fail(*s, CUDA_ERROR_INVALID_VALUE, "nothing to link");
  std::string what;
  if (units.size() == 1) {
    s->output = units[0]->bytes;
    if (units[0]->kind == Unit::Kind::kPtx) s->output.push_back(0);
    what = "1 input, loaded as it is";
  } else {
    const int arch = current_arch();
    std::vector<std::string> modules;
    for (const Unit* u : units) {
      if (u->kind == Unit::Kind::kCubin) {
        return fail(*s, CUDA_ERROR_NOT_SUPPORTED,
                    u->name + ": a cubin cannot be linked with other inputs here (PTX only)");
      }
      std::string ptx, error;
      if (!image::extract_ptx(u->bytes, &ptx, &error,
                              arch < 0 ? image::kAnyArch : static_cast<uint32_t>(arch))) {
        return fail(*s, CUDA_ERROR_INVALID_IMAGE, u->name + ": " + error);
      }
      modules.push_back(std::move(ptx));
    }
    std::string merged;
    if (CUresult e = merge_ptx(*s, modules, &merged)) return e;
    s->output.assign(merged.begin(), merged.end());
    s->output.push_back(0);
    what = std::to_string(units.size()) + " inputs, into one PTX module";
  }
  write_logs(*s, "cuwire link: " + what + "\n", "");
  *cubinOut = s->output.data();
  *sizeOut = s->output.size();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
  std::unique_ptr<LinkState> gone;
  LinkTable& t = links();
  std::lock_guard lock(t.mu);
  auto it = t.states.find(reinterpret_cast<LinkState*>(state));
  if (it == t.states.end()) return CUDA_ERROR_INVALID_VALUE;
  gone = std::move(it->second);
  t.states.erase(it);
  return CUDA_SUCCESS;
}

}  // extern "C"
