// CUDA module images: what an application hands to cuModuleLoadData / cuLibraryLoadData /
// __cudaRegisterFatBinary, and what the server pulls out of it.
//
// Two sides with different trust:
//  - Client (in the application's process): classify(const void*) and image_size(const void*)
//    get only a pointer, as the driver API does, and trust the application's memory, exactly
//    as the real driver would. They tell the shim how many bytes to send.
//  - Server: everything taking a std::span treats the bytes as hostile. It never reads outside
//    the span, validates every size and offset, and caps decompressed output.
//
// Thread-safety: every function here is pure (no global state) and may be called from any
// thread.
//
// Formats (layouts verified against nvcc 13.0 output, see tests/image/):
//  - Fatbin wrapper (__fatBinC_Wrapper_t, what cudart registers): 24 bytes
//      { u32 magic 0x466243b1; u32 version; const void* data; void* filename_or_fatbins; }
//    `data` points at a fatbin. An nvcc 13 program registers its kernels through a version 2
//    wrapper (filename_or_fatbins: prelinked fatbins list) and static cudart its own through a
//    version 1 one; both live in the host ELF's .nvFatBinSegment, the fatbins in .nv_fatbin.
//  - Fatbin: header { u32 magic 0xba55ed50; u16 version; u16 header_size; u64 files_size; }
//    followed by files_size bytes of entries, each { entry header; payload }.
//  - Fatbin entry header (little endian, offsets from the entry start):
//      0x00 u16 kind (1 = PTX, 2 = ELF)    0x02 u16 version (0x0101)
//      0x04 u32 header_size (0x40 ELF, 0x50 PTX)
//      0x08 u64 payload_size (padded to 8; the payload starts at header_size)
//      0x10 u32 compressed_size (exact byte count of a compressed payload, else 0)
//      0x14 u32 0x40 for PTX, 0 for ELF (meaning unverified; not used)
//      0x18 u16 minor, 0x1a u16 major (PTX: ISA version, 9.0 on nvcc 13; ELF: 1.8; not used)
//      0x1c u32 sm arch (75 = sm_75 / compute_75)
//      0x20 u32 name offset, 0x24 u32 name length (0 here)
//      0x28 u64 flags: 0x2000 LZ4 block, 0x8000 ZSTD frame; nvcc 13 also sets 0x11 (public
//               notes read 0x1 as 64-bit and 0x10 as Linux host; unverified)
//      0x30 u64 zero
//      0x38 u64 decompressed_size (0 when not compressed)
//    PTX entries carry 0x10 more header bytes (0x40 u64 = 0x48, 0x48 u64 = 0) not needed here.
//  - ELF (cubin): ELF64 little endian, e_machine EM_CUDA (190). Kernels are STT_FUNC symbols
//    with STO_CUDA_ENTRY (0x10) in st_other, code in `.text.<name>`, attributes in
//    `.nv.info.<name>`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cuwire::image {

inline constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;
inline constexpr uint32_t kFatbinMagic = 0xba55ed50;

enum class Kind { kUnknown, kFatbinWrapper, kFatbin, kElf, kPtx };

const char* kind_name(Kind kind);

// ---------------------------------------------------------------------------------------------
// Client side: pointer only, memory trusted.

// Reads the image's leading bytes one at a time and stops at the first mismatch, so a short
// NUL-terminated PTX string is never over-read. kPtx means "the first byte is text"; as with
// cuModuleLoadData, anything else is kUnknown. nullptr is kUnknown.
Kind classify(const void* image);

// For a fatbin wrapper, the fatbin it points to; any other image is returned unchanged.
const void* resolve_wrapper(const void* image);

// Number of bytes that make up the image, 0 for kUnknown or a malformed header:
//   fatbin wrapper → the size of the fatbin it points to (send resolve_wrapper(image), not the
//                    wrapper: its pointers mean nothing in another process);
//   fatbin         → header_size + files_size;
//   ELF            → the furthest end of the ELF header, section and program header tables,
//                    file-backed sections and segments (only 64-bit ELF is supported);
//   PTX            → strlen + 1 (the NUL travels too).
size_t image_size(const void* image);

// ---------------------------------------------------------------------------------------------
// Server side: bounded, hostile input.

// Same answer as classify(const void*), but never reads past the span.
Kind classify(std::span<const uint8_t> image);

struct Limits {
  // Cap on the total bytes one call may decompress, over all entries.
  size_t max_decompressed = size_t{1} << 30;
};

enum class EntryKind { kPtx, kElf, kOther };

struct FatbinEntry {
  EntryKind kind = EntryKind::kOther;
  uint16_t raw_kind = 0;         // the header's kind field, for kOther
  uint32_t arch = 0;             // 75 for sm_75 / compute_75
  uint64_t flags = 0;            // raw header flags
  bool compressed = false;       // payload was LZ4 or ZSTD in the fatbin
  std::vector<uint8_t> payload;  // decompressed PTX/ELF; kOther entries as stored
};

// Parses one fatbin, plus any further fatbins that follow it back to back (as in a linked
// program's .nv_fatbin section); bytes after the last one are ignored. Appends the entries in
// file order. On failure returns false with *error set, and *out is left unspecified.
bool parse_fatbin(std::span<const uint8_t> fatbin, std::vector<FatbinEntry>* out,
                  std::string* error, const Limits& limits = {});

inline constexpr uint32_t kAnyArch = UINT32_MAX;

// The PTX text (without trailing NULs) of a PTX image or of a fatbin's PTX entry: the one with
// the highest arch ≤ max_arch, the later one on a tie. Fails for a cubin ("cubin holds no
// PTX"), a fatbin without a usable PTX entry, a wrapper (the client must resolve it), or bytes
// that are not text.
bool extract_ptx(std::span<const uint8_t> image, std::string* ptx, std::string* error,
                 uint32_t max_arch = kAnyArch, const Limits& limits = {});

// ---------------------------------------------------------------------------------------------
// Cubin (ELF) metadata.

struct KernelParam {
  uint32_t ordinal = 0;  // position in the signature
  uint32_t offset = 0;   // byte offset in the parameter buffer
  uint32_t size = 0;     // bytes
  uint32_t raw = 0;      // the record's last word: size << 18 | cbank << 12 | ... for
                         // EIATTR_KPARAM_INFO, the plain size for its 4 KiB+ successor (0x45)
};

struct ElfKernel {
  std::string name;                 // mangled, as cuModuleGetFunction expects
  std::vector<KernelParam> params;  // by ordinal, from EIATTR_KPARAM_INFO (or 0x45)
  uint32_t param_bytes = 0;         // EIATTR_PARAM_CBANK size (or EIATTR_CBANK_PARAM_SIZE)
  uint32_t param_bank_offset = 0;   // where the parameters start in constant bank 0
  uint32_t num_regs = 0;            // EIATTR_REGCOUNT from .nv.info, 0 if absent
};

struct ElfGlobal {
  std::string name;
  std::string section;  // .nv.global, .nv.global.init, .nv.constant3, ...
  uint64_t offset = 0;  // st_value: offset within the section
  uint64_t size = 0;
  bool constant = false;  // in a .nv.constant* bank (__constant__)
};

// Kernels of a cubin, in symbol-table order. A cubin without kernels gives an empty list.
bool elf_kernels(std::span<const uint8_t> elf, std::vector<ElfKernel>* out, std::string* error);

// Data symbols (STT_OBJECT) placed in .nv.global* or .nv.constant* sections.
bool elf_globals(std::span<const uint8_t> elf, std::vector<ElfGlobal>* out, std::string* error);

// ---------------------------------------------------------------------------------------------
// Device memory an image's module-scope variables take (__device__ and __constant__ data): what
// loading it costs a tenant's memory cap.

// Bytes of the .global and .const variables PTX text defines at module scope (sizes as
// declared: element size x vector width x dimensions; .extern declarations, texture, sampler
// and surface references take none). Saturates at UINT64_MAX.
uint64_t ptx_global_bytes(std::string_view ptx);

// Bytes of the data symbols of an ELF image's .nv.global* and .nv.constant* sections.
bool elf_global_bytes(std::span<const uint8_t> elf, uint64_t* out, std::string* error);

// Of a module image (PTX, cubin or fatbin entries): for fatbin entries, the first ELF's, else
// the PTX entry's, as one program's variables are the same whichever entry a driver picks.
bool entries_global_bytes(const std::vector<FatbinEntry>& entries, uint64_t* out,
                          std::string* error);

}  // namespace cuwire::image
