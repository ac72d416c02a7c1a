// Kernel parameter layouts: what cuwire's cubin parser reads from .nv.info (protocol/image.h,
// elf_kernels) against what the driver in front of it answers, through both entry points the
// server uses (server/calls/modules.cc): cuFuncGetParamInfo on a module's function and
// cuKernelGetParamInfo on a library's kernel, index by index until the driver says
// CUDA_ERROR_INVALID_VALUE (which gpu-server takes as "past the last parameter").
//
//   param_info_check FILE...     cubins or fatbins (every ELF entry of a fatbin is checked alone)
//
// Prints one line per kernel and a summary line last; exit status 0 only when at least one
// kernel was compared and none differed. A fatbin's ELF for another SM generation than the
// device's, which the driver refuses, is reported and skipped, not counted as an error.

#include <cuda.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol/image.h"
#include "tests/gpu/driver_symbols.h"

namespace cuwire::gpu_check {
namespace {

using Layout = std::vector<std::pair<size_t, size_t>>;  // (offset, size) by index

constexpr size_t kMaxProbe = 4096;  // more parameters than any kernel can have

std::string layout_text(const Layout& l) {
  std::string s;
  for (const auto& [off, size] : l) {
    if (!s.empty()) s += ' ';
    s += std::to_string(off) + "+" + std::to_string(size);
  }
  return s.empty() ? "none" : s;
}

struct Counts {
  int kernels = 0;
  int differ = 0;
  int images = 0;
  int skipped = 0;
  int errors = 0;
};

class Checker {
 public:
  // sm: the device's compute capability as 10 * major + minor.
  Checker(const Driver& d, uint32_t sm) : d_(d), sm_(sm) {}

  // One ELF image, labelled for the output; arch: the SM it was built for, 0 when unknown.
  void check_elf(const std::string& label, std::span<const uint8_t> elf, uint32_t arch, Counts* c) {
    std::vector<image::ElfKernel> kernels;
    std::string error;
    if (!image::elf_kernels(elf, &kernels, &error)) {
      std::printf("ERROR    %s: cuwire's parser refuses it: %s\n", label.c_str(), error.c_str());
      ++c->errors;
      return;
    }
    CUmodule module = nullptr;
    CUresult rc = d_.cuModuleLoadData(&module, elf.data());
    // SASS runs on its own major generation, on minors from its own up.
    const bool foreign = arch != 0 && (arch / 10 != sm_ / 10 || arch % 10 > sm_ % 10);
    if (rc != CUDA_SUCCESS && foreign) {
      std::printf("skipped  %s: not for this device (%s)\n", label.c_str(),
                  d_.error_name(rc).c_str());
      ++c->skipped;
      return;
    }
    if (rc != CUDA_SUCCESS) {
      std::printf("ERROR    %s: cuModuleLoadData: %s\n", label.c_str(), d_.error_name(rc).c_str());
      ++c->errors;
      return;
    }
    CUlibrary library = nullptr;
    rc = d_.cuLibraryLoadData(&library, elf.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (rc != CUDA_SUCCESS) {
      std::printf("ERROR    %s: cuLibraryLoadData: %s\n", label.c_str(), d_.error_name(rc).c_str());
      ++c->errors;
      library = nullptr;
    }
    ++c->images;
    for (const image::ElfKernel& k : kernels) check_kernel(label, k, module, library, c);
    if (library) d_.cuLibraryUnload(library);
    d_.cuModuleUnload(module);
  }

 private:
  // Layout by index until the first error; *end gets that error.
  template <typename Handle, typename Fn>
  static Layout probe(Fn fn, Handle h, CUresult* end) {
    Layout l;
    for (size_t i = 0; i < kMaxProbe; ++i) {
      size_t off = 0, size = 0;
      CUresult rc = fn(h, i, &off, &size);
      if (rc != CUDA_SUCCESS) {
        *end = rc;
        return l;
      }
      l.emplace_back(off, size);
    }
    *end = CUDA_SUCCESS;
    return l;
  }

  // What the driver's `name` says of h that differs from the parsed layout: another layout, or
  // no CUDA_ERROR_INVALID_VALUE past the last parameter.
  template <typename Handle, typename Fn>
  void compare(const std::string& name, Fn fn, Handle h, const Layout& parsed,
               std::vector<std::string>* problems) const {
    CUresult end = CUDA_SUCCESS;
    Layout got = probe(fn, h, &end);
    if (got != parsed) problems->push_back(name + " says " + layout_text(got));
    if (end != CUDA_ERROR_INVALID_VALUE)
      problems->push_back(name + " past the last parameter: " + d_.error_name(end));
  }

  void check_kernel(const std::string& label, const image::ElfKernel& k, CUmodule module,
                    CUlibrary library, Counts* c) {
    ++c->kernels;
    Layout parsed;
    bool ordinals_ok = true;
    for (size_t i = 0; i < k.params.size(); ++i) {
      parsed.emplace_back(k.params[i].offset, k.params[i].size);
      ordinals_ok = ordinals_ok && k.params[i].ordinal == i;
    }
    std::vector<std::string> problems;
    if (!ordinals_ok) problems.push_back("parser's ordinals are not 0..n-1");

    CUfunction f = nullptr;
    if (CUresult rc = d_.cuModuleGetFunction(&f, module, k.name.c_str())) {
      problems.push_back("cuModuleGetFunction: " + d_.error_name(rc));
    } else {
      compare("cuFuncGetParamInfo", d_.cuFuncGetParamInfo, f, parsed, &problems);
    }
    if (library) {
      CUkernel kern = nullptr;
      if (CUresult rc = d_.cuLibraryGetKernel(&kern, library, k.name.c_str())) {
        problems.push_back("cuLibraryGetKernel: " + d_.error_name(rc));
      } else {
        compare("cuKernelGetParamInfo", d_.cuKernelGetParamInfo, kern, parsed, &problems);
      }
    }
    if (problems.empty()) {
      std::printf("ok       %s %s: %s\n", label.c_str(), k.name.c_str(),
                  layout_text(parsed).c_str());
      return;
    }
    ++c->differ;
    std::printf("DIFFERS  %s %s: .nv.info says %s", label.c_str(), k.name.c_str(),
                layout_text(parsed).c_str());
    for (const std::string& p : problems) std::printf("; %s", p.c_str());
    std::printf("\n");
  }

  const Driver& d_;
  const uint32_t sm_;
};

bool read_file(const char* path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: param_info_check CUBIN_OR_FATBIN...\n");
    return 2;
  }
  Driver d;
  if (!d.load()) return 1;
  CUresult rc = d.cuInit(0);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (rc == CUDA_SUCCESS) rc = d.cuDeviceGet(&dev, 0);
  if (rc == CUDA_SUCCESS) rc = d.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (rc == CUDA_SUCCESS) rc = d.cuCtxSetCurrent(ctx);
  if (rc != CUDA_SUCCESS) {
    std::printf("param_info_check: no device to check against: %s\n", d.error_name(rc).c_str());
    return 1;
  }
  int version = 0, major = 0, minor = 0;
  d.cuDriverGetVersion(&version);
  d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);

  Checker checker(d, static_cast<uint32_t>(major * 10 + minor));
  Counts c;
  for (int i = 1; i < argc; ++i) {
    std::vector<uint8_t> bytes;
    const std::string name = base_name(argv[i]);
    if (!read_file(argv[i], &bytes)) {
      std::printf("ERROR    %s: cannot read it\n", argv[i]);
      ++c.errors;
      continue;
    }
    switch (image::classify(bytes)) {
      case image::Kind::kElf:
        checker.check_elf(name, bytes, 0, &c);
        break;
      case image::Kind::kFatbin: {
        std::vector<image::FatbinEntry> entries;
        std::string error;
        if (!image::parse_fatbin(bytes, &entries, &error)) {
          std::printf("ERROR    %s: cuwire's parser refuses it: %s\n", name.c_str(), error.c_str());
          ++c.errors;
          break;
        }
        int n = 0;
        for (const image::FatbinEntry& e : entries) {
          if (e.kind != image::EntryKind::kElf) continue;
          checker.check_elf(
              name + "[elf " + std::to_string(n++) + ", sm_" + std::to_string(e.arch) + "]",
              e.payload, e.arch, &c);
        }
        break;
      }
      default:
        std::printf("ERROR    %s: neither a cubin nor a fatbin\n", name.c_str());
        ++c.errors;
    }
  }
  std::printf(
      "param_info_check: %d kernels in %d cubins on sm_%d%d (driver %d): %d differ, %d errors, "
      "%d cubins for other GPUs skipped\n",
      c.kernels, c.images, major, minor, version, c.differ, c.errors, c.skipped);
  return c.kernels > 0 && c.differ == 0 && c.errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace cuwire::gpu_check

int main(int argc, char** argv) { return cuwire::gpu_check::run(argc, argv); }
