#include "protocol/image.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <string_view>

namespace cuwire::image {
namespace {

constexpr uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

constexpr size_t kFatbinHeaderSize = 16;
// Every field this file reads lies in the first 0x40 bytes of an entry header.
constexpr size_t kEntryHeaderMin = 0x40;
constexpr uint16_t kEntryKindPtx = 1;
constexpr uint16_t kEntryKindElf = 2;
constexpr uint64_t kFlagLz4 = 0x2000;
constexpr uint64_t kFlagZstd = 0x8000;

// st_other bit that nvcc sets on __global__ functions (device functions lack it).
constexpr uint8_t kStoCudaEntry = 0x10;

// .nv.info record formats: every record starts with {u8 format, u8 attribute, u16 x}; for
// kEifmtSval x is the byte count of the payload that follows, otherwise x is the value.
constexpr uint8_t kEifmtNval = 1;
constexpr uint8_t kEifmtBval = 2;
constexpr uint8_t kEifmtHval = 3;
constexpr uint8_t kEifmtSval = 4;
// Attribute ids (as named by NVIDIA's tools; values checked on nvcc 13 cubins).
constexpr uint8_t kEiattrParamCbank = 0x0a;      // SVAL {u32 sym, u16 offset, u16 size}
constexpr uint8_t kEiattrKparamInfo = 0x17;      // SVAL {u32 index, u16 ordinal, u16 offset,
                                                 //       u32 size << 18 | cbank << 12 | ...}
constexpr uint8_t kEiattrCbankParamSize = 0x19;  // HVAL size
// What nvcc 13 emits instead of KPARAM_INFO once the parameters pass 4 KiB (CUDA 12.1 large
// kernel parameters): {u32 index, u16 ordinal, u16 offset, u32 size}, size not packed.
constexpr uint8_t kEiattrKparamInfoV2 = 0x45;
constexpr uint8_t kEiattrRegcount = 0x2f;  // SVAL {u32 sym, u32 registers}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
T load(const void* p) {
  return load<T>(static_cast<const uint8_t*>(p));
}

bool fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

bool is_text_byte(uint8_t c) {
  return c >= 0x20 ? c != 0x7f : (c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v');
}

// Compares up to 4 magic bytes one at a time, so a NUL-terminated string shorter than the
// magic is never over-read (no magic contains a NUL).
bool has_magic(const uint8_t* p, const uint8_t magic[4]) {
  for (int i = 0; i < 4; ++i) {
    if (p[i] != magic[i]) return false;
  }
  return true;
}

void le_bytes(uint32_t v, uint8_t out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// ---------------------------------------------------------------------------------------------
// Trusted ELF size (client side).

size_t trusted_elf_size(const uint8_t* p) {
  if (p[EI_CLASS] != ELFCLASS64 || p[EI_DATA] != ELFDATA2LSB) return 0;
  const auto eh = load<Elf64_Ehdr>(p);
  uint64_t end = sizeof(Elf64_Ehdr);
  if (eh.e_shoff != 0 && eh.e_shentsize >= sizeof(Elf64_Shdr)) {
    uint64_t shnum = eh.e_shnum;
    if (shnum == 0) shnum = load<Elf64_Shdr>(p + eh.e_shoff).sh_size;  // extended numbering
    end = std::max(end, eh.e_shoff + shnum * eh.e_shentsize);
    for (uint64_t i = 0; i < shnum; ++i) {
      const auto sh = load<Elf64_Shdr>(p + eh.e_shoff + i * eh.e_shentsize);
      if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL) {
        end = std::max(end, sh.sh_offset + sh.sh_size);
      }
    }
  }
  if (eh.e_phoff != 0 && eh.e_phentsize >= sizeof(Elf64_Phdr)) {
    end = std::max(end, eh.e_phoff + uint64_t{eh.e_phnum} * eh.e_phentsize);
    for (uint64_t i = 0; i < eh.e_phnum; ++i) {
      const auto ph = load<Elf64_Phdr>(p + eh.e_phoff + i * eh.e_phentsize);
      end = std::max(end, ph.p_offset + ph.p_filesz);
    }
  }
  return static_cast<size_t>(end);
}

// ---------------------------------------------------------------------------------------------
// Decompression (server side).

bool lz4_decompress(std::span<const uint8_t> src, uint64_t size, std::vector<uint8_t>* out,
                    std::string* error) {
  // An LZ4 block expands at most ~255x; a larger claim is a lie meant to make us allocate.
  if (src.size() > INT_MAX || size > INT_MAX || size > uint64_t{src.size()} * 255 + 64) {
    return fail(error, "LZ4 entry declares an impossible decompressed size " +
                           std::to_string(size) + " for " + std::to_string(src.size()) +
                           " compressed bytes");
  }
  out->resize(size);
  const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src.data()),
                                    reinterpret_cast<char*>(out->data()),
                                    static_cast<int>(src.size()), static_cast<int>(size));
  if (n < 0) return fail(error, "LZ4 entry payload is corrupt");
  if (static_cast<uint64_t>(n) != size) {
    return fail(error, "LZ4 entry decompressed to " + std::to_string(n) + " bytes, header says " +
                           std::to_string(size));
  }
  return true;
}

struct DctxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Streams into a buffer that grows with the output actually produced, so a small hostile frame
// that only claims a huge size costs little memory.
bool zstd_decompress(std::span<const uint8_t> src, uint64_t size, std::vector<uint8_t>* out,
                     std::string* error) {
  std::unique_ptr<ZSTD_DCtx, DctxDeleter> dctx(ZSTD_createDCtx());
  if (!dctx) return fail(error, "out of memory creating a ZSTD context");
  out->resize(static_cast<size_t>(
      std::min<uint64_t>(size, std::max<uint64_t>(uint64_t{src.size()} * 4, uint64_t{1} << 16))));
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  size_t produced = 0;
  size_t pending = 1;  // ZSTD's "more to come" hint; 0 once a frame is complete and flushed
  while (in.pos < in.size || pending != 0) {
    if (produced == out->size()) {
      if (out->size() == size) {
        return fail(error, "ZSTD entry decompresses to more than its declared " +
                               std::to_string(size) + " bytes");
      }
      out->resize(static_cast<size_t>(std::min<uint64_t>(size, uint64_t{out->size()} * 2)));
    }
    ZSTD_outBuffer o{out->data(), out->size(), produced};
    const size_t in_before = in.pos;
    pending = ZSTD_decompressStream(dctx.get(), &o, &in);
    if (ZSTD_isError(pending)) {
      return fail(error,
                  std::string("ZSTD entry payload is corrupt: ") + ZSTD_getErrorName(pending));
    }
    const bool progressed = o.pos != produced || in.pos != in_before;
    produced = o.pos;
    if (!progressed && in.pos == in.size && produced < out->size()) {
      return fail(error, "ZSTD entry payload is truncated");
    }
  }
  if (produced != size) {
    return fail(error, "ZSTD entry decompressed to " + std::to_string(produced) +
                           " bytes, header says " + std::to_string(size));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Fatbin parsing (server side).

bool parse_entry(std::span<const uint8_t> entry_bytes, uint64_t payload_size, size_t header_size,
                 const Limits& limits, size_t* decompressed_total, FatbinEntry* e,
                 std::string* error) {
  const uint8_t* h = entry_bytes.data();
  e->raw_kind = load<uint16_t>(h + 0x00);
  e->kind = e->raw_kind == kEntryKindPtx   ? EntryKind::kPtx
            : e->raw_kind == kEntryKindElf ? EntryKind::kElf
                                           : EntryKind::kOther;
  const uint32_t compressed_size = load<uint32_t>(h + 0x10);
  e->arch = load<uint32_t>(h + 0x1c);
  e->flags = load<uint64_t>(h + 0x28);
  const uint64_t decompressed_size = load<uint64_t>(h + 0x38);
  const auto payload = entry_bytes.subspan(header_size, static_cast<size_t>(payload_size));

  const bool lz4 = (e->flags & kFlagLz4) != 0;
  const bool zstd = (e->flags & kFlagZstd) != 0;
  e->compressed = lz4 || zstd;
  // Entries of other kinds (kind 8 in the toolkit's own libraries: an encrypted, checksummed
  // payload) are kept as they are; nothing here reads them, and failing on one would lose the
  // PTX and cubins beside it.
  if (!e->compressed || e->kind == EntryKind::kOther) {
    e->payload.assign(payload.begin(), payload.end());
    return true;
  }
  if (lz4 && zstd) return fail(error, "fatbin entry claims both LZ4 and ZSTD compression");
  if (compressed_size == 0 || compressed_size > payload_size) {
    return fail(error, "fatbin entry compressed size " + std::to_string(compressed_size) +
                           " does not fit its payload of " + std::to_string(payload_size));
  }
  if (decompressed_size == 0) {
    return fail(error, "compressed fatbin entry declares a decompressed size of 0");
  }
  if (decompressed_size > limits.max_decompressed - *decompressed_total) {
    return fail(error, "fatbin decompresses to more than the limit of " +
                           std::to_string(limits.max_decompressed) + " bytes");
  }
  const auto src = payload.first(compressed_size);
  const bool ok = lz4 ? lz4_decompress(src, decompressed_size, &e->payload, error)
                      : zstd_decompress(src, decompressed_size, &e->payload, error);
  if (!ok) return false;
  *decompressed_total += e->payload.size();
  return true;
}

// Parses the fatbin at the start of `bytes`; *consumed is its size.
bool parse_one_fatbin(std::span<const uint8_t> bytes, const Limits& limits,
                      size_t* decompressed_total, size_t* consumed, std::vector<FatbinEntry>* out,
                      std::string* error) {
  if (bytes.size() < kFatbinHeaderSize) return fail(error, "fatbin header is truncated");
  if (load<uint32_t>(bytes.data()) != kFatbinMagic) return fail(error, "bad fatbin magic");
  const size_t header_size = load<uint16_t>(bytes.data() + 6);
  const uint64_t files_size = load<uint64_t>(bytes.data() + 8);
  if (header_size < kFatbinHeaderSize || header_size > bytes.size()) {
    return fail(error, "fatbin header size " + std::to_string(header_size) + " is invalid");
  }
  if (files_size > bytes.size() - header_size) {
    return fail(error, "fatbin declares " + std::to_string(files_size) + " bytes of entries, " +
                           std::to_string(bytes.size() - header_size) + " present");
  }
  auto files = bytes.subspan(header_size, static_cast<size_t>(files_size));
  while (!files.empty()) {
    if (files.size() < kEntryHeaderMin) return fail(error, "fatbin entry header is truncated");
    const size_t entry_header_size = load<uint32_t>(files.data() + 0x04);
    const uint64_t payload_size = load<uint64_t>(files.data() + 0x08);
    if (entry_header_size < kEntryHeaderMin || entry_header_size > files.size()) {
      return fail(error,
                  "fatbin entry header size " + std::to_string(entry_header_size) + " is invalid");
    }
    if (payload_size > files.size() - entry_header_size) {
      return fail(error, "fatbin entry payload of " + std::to_string(payload_size) +
                             " bytes overruns the fatbin");
    }
    const size_t entry_size = entry_header_size + static_cast<size_t>(payload_size);
    FatbinEntry entry;
    if (!parse_entry(files.first(entry_size), payload_size, entry_header_size, limits,
                     decompressed_total, &entry, error)) {
      return false;
    }
    out->push_back(std::move(entry));
    files = files.subspan(entry_size);
  }
  *consumed = header_size + static_cast<size_t>(files_size);
  return true;
}

// PTX text without trailing NULs, or false if the bytes before the first NUL are not text.
bool ptx_text(std::span<const uint8_t> bytes, std::string* ptx, std::string* error) {
  const auto nul = std::find(bytes.begin(), bytes.end(), uint8_t{0});
  const auto text = bytes.first(static_cast<size_t>(nul - bytes.begin()));
  if (text.empty()) return fail(error, "PTX image is empty");
  for (size_t i = 0; i < text.size(); ++i) {
    if (!is_text_byte(text[i])) {
      return fail(error, "PTX image holds a non-text byte at offset " + std::to_string(i));
    }
  }
  ptx->assign(text.begin(), text.end());
  return true;
}

// ---------------------------------------------------------------------------------------------
// ELF parsing (server side): every table and string is checked against the span.

struct Section {
  std::string_view name;
  Elf64_Shdr header;
  std::span<const uint8_t> data;  // empty for SHT_NOBITS
};

struct Symbol {
  std::string_view name;
  Elf64_Sym sym;
};

class ElfReader {
 public:
  bool open(std::span<const uint8_t> bytes, std::string* error) {
    if (bytes.size() < sizeof(Elf64_Ehdr) || !has_magic(bytes.data(), kElfMagic)) {
      return fail(error, "not an ELF image");
    }
    if (bytes[EI_CLASS] != ELFCLASS64 || bytes[EI_DATA] != ELFDATA2LSB) {
      return fail(error, "ELF image is not 64-bit little-endian");
    }
    const auto eh = load<Elf64_Ehdr>(bytes.data());
    if (eh.e_shoff == 0) return fail(error, "ELF image has no section headers");
    if (eh.e_shentsize < sizeof(Elf64_Shdr)) {
      return fail(error, "ELF section header entry size is too small");
    }
    if (eh.e_shoff > bytes.size() || bytes.size() - eh.e_shoff < sizeof(Elf64_Shdr)) {
      return fail(error, "ELF section header table is out of bounds");
    }
    uint64_t shnum = eh.e_shnum;
    uint64_t shstrndx = eh.e_shstrndx;
    const auto sh0 = load<Elf64_Shdr>(bytes.data() + eh.e_shoff);
    if (shnum == 0) shnum = sh0.sh_size;  // extended numbering
    if (shstrndx == SHN_XINDEX) shstrndx = sh0.sh_link;
    if (shnum > (bytes.size() - eh.e_shoff) / eh.e_shentsize) {
      return fail(error, "ELF section header table is out of bounds");
    }
    sections_.resize(static_cast<size_t>(shnum));
    for (size_t i = 0; i < sections_.size(); ++i) {
      Section& s = sections_[i];
      s.header = load<Elf64_Shdr>(bytes.data() + eh.e_shoff + i * eh.e_shentsize);
      if (s.header.sh_type == SHT_NOBITS || s.header.sh_type == SHT_NULL) continue;
      if (s.header.sh_offset > bytes.size() ||
          s.header.sh_size > bytes.size() - s.header.sh_offset) {
        return fail(error, "ELF section " + std::to_string(i) + " is out of bounds");
      }
      s.data = bytes.subspan(static_cast<size_t>(s.header.sh_offset),
                             static_cast<size_t>(s.header.sh_size));
    }
    if (shstrndx >= sections_.size()) return fail(error, "ELF section name table is missing");
    const auto shstrtab = sections_[static_cast<size_t>(shstrndx)].data;
    for (size_t i = 0; i < sections_.size(); ++i) {
      if (!string_at(shstrtab, sections_[i].header.sh_name, &sections_[i].name)) {
        return fail(error, "ELF section " + std::to_string(i) + " has a bad name");
      }
    }
    return true;
  }

  // The symbol table; an image without one has no symbols.
  bool symbols(std::vector<Symbol>* out, std::string* error) const {
    out->clear();
    for (const Section& s : sections_) {
      if (s.header.sh_type != SHT_SYMTAB) continue;
      if (s.header.sh_entsize != sizeof(Elf64_Sym)) {
        return fail(error, "ELF symbol table has a bad entry size");
      }
      if (s.header.sh_link >= sections_.size()) {
        return fail(error, "ELF symbol table links to a missing string table");
      }
      const auto strtab = sections_[s.header.sh_link].data;
      const size_t count = s.data.size() / sizeof(Elf64_Sym);
      out->reserve(count);
      for (size_t i = 0; i < count; ++i) {
        Symbol sym;
        sym.sym = load<Elf64_Sym>(s.data.data() + i * sizeof(Elf64_Sym));
        if (!string_at(strtab, sym.sym.st_name, &sym.name)) {
          return fail(error, "ELF symbol " + std::to_string(i) + " has a bad name");
        }
        out->push_back(sym);
      }
      return true;
    }
    return true;
  }

  // The section a symbol is defined in, or nullptr (undefined, absolute, out of range).
  // TODO(test): SHN_XINDEX symbols (> 65279 sections) are treated as undefined.
  const Section* section_of(const Elf64_Sym& sym) const {
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE) return nullptr;
    if (sym.st_shndx >= sections_.size()) return nullptr;
    return &sections_[sym.st_shndx];
  }

  const Section* find(std::string_view name) const {
    for (const Section& s : sections_) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }

 private:
  static bool string_at(std::span<const uint8_t> table, uint64_t offset, std::string_view* out) {
    if (offset == 0 && table.empty()) {  // unnamed, in an image without a string table
      *out = {};
      return true;
    }
    if (offset >= table.size()) return false;
    const auto rest = table.subspan(static_cast<size_t>(offset));
    const auto nul = std::find(rest.begin(), rest.end(), uint8_t{0});
    if (nul == rest.end()) return false;
    *out = std::string_view(reinterpret_cast<const char*>(rest.data()),
                            static_cast<size_t>(nul - rest.begin()));
    return true;
  }

  std::vector<Section> sections_;
};

struct InfoRecord {
  uint8_t format;
  uint8_t attribute;
  uint16_t value;                    // the value for non-SVAL formats, the size for SVAL
  std::span<const uint8_t> payload;  // SVAL only
};

// Walks a .nv.info section's records.
template <class F>
bool for_each_info_record(const Section& section, std::string* error, F&& f) {
  auto rest = section.data;
  while (!rest.empty()) {
    if (rest.size() < 4) return fail(error, std::string(section.name) + ": truncated record");
    InfoRecord r{rest[0], rest[1], load<uint16_t>(rest.data() + 2), {}};
    rest = rest.subspan(4);
    switch (r.format) {
      case kEifmtNval:
      case kEifmtBval:
      case kEifmtHval:
        break;
      case kEifmtSval:
        if (r.value > rest.size()) {
          return fail(error, std::string(section.name) + ": record overruns the section");
        }
        r.payload = rest.first(r.value);
        rest = rest.subspan(r.value);
        break;
      default:
        return fail(error, std::string(section.name) + ": unknown record format " +
                               std::to_string(r.format));
    }
    if (!f(r)) return false;
  }
  return true;
}

bool kernel_info(const ElfReader& elf, ElfKernel* k, std::string* error) {
  const Section* info = elf.find(".nv.info." + k->name);
  if (info == nullptr) return true;  // a kernel without attributes takes no parameters
  const std::string where = ".nv.info." + k->name;
  uint32_t cbank_param_size = 0;
  std::map<uint32_t, KernelParam> by_ordinal;
  const bool ok = for_each_info_record(*info, error, [&](const InfoRecord& r) {
    if (r.attribute == kEiattrParamCbank && r.format == kEifmtSval) {
      if (r.payload.size() < 8) return fail(error, where + ": short EIATTR_PARAM_CBANK");
      k->param_bank_offset = load<uint16_t>(r.payload.data() + 4);
      k->param_bytes = load<uint16_t>(r.payload.data() + 6);
    } else if (r.attribute == kEiattrCbankParamSize && r.format == kEifmtHval) {
      cbank_param_size = r.value;
    } else if ((r.attribute == kEiattrKparamInfo || r.attribute == kEiattrKparamInfoV2) &&
               r.format == kEifmtSval) {
      if (r.payload.size() < 12) return fail(error, where + ": short EIATTR_KPARAM_INFO");
      KernelParam p;
      p.ordinal = load<uint16_t>(r.payload.data() + 4);
      p.offset = load<uint16_t>(r.payload.data() + 6);
      p.raw = load<uint32_t>(r.payload.data() + 8);
      p.size = r.attribute == kEiattrKparamInfo ? p.raw >> 18 : p.raw;
      if (!by_ordinal.emplace(p.ordinal, p).second) {
        return fail(error, where + ": parameter " + std::to_string(p.ordinal) + " listed twice");
      }
    }
    return true;
  });
  if (!ok) return false;
  if (k->param_bytes == 0) k->param_bytes = cbank_param_size;
  for (const auto& [ordinal, p] : by_ordinal) {
    if (ordinal != k->params.size()) {
      return fail(error, where + ": parameter " + std::to_string(k->params.size()) + " is missing");
    }
    if (p.offset + uint64_t{p.size} > k->param_bytes) {
      return fail(error, where + ": parameter " + std::to_string(ordinal) + " lies outside the " +
                             std::to_string(k->param_bytes) + "-byte parameter buffer");
    }
    k->params.push_back(p);
  }
  return true;
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kUnknown:
      return "unknown";
    case Kind::kFatbinWrapper:
      return "fatbin wrapper";
    case Kind::kFatbin:
      return "fatbin";
    case Kind::kElf:
      return "ELF";
    case Kind::kPtx:
      return "PTX";
  }
  return "invalid";
}

// ---------------------------------------------------------------------------------------------
// Client side.

Kind classify(const void* image) {
  if (image == nullptr) return Kind::kUnknown;
  const auto* p = static_cast<const uint8_t*>(image);
  uint8_t magic[4];
  le_bytes(kFatbinMagic, magic);
  if (has_magic(p, magic)) return Kind::kFatbin;
  le_bytes(kFatbinWrapperMagic, magic);
  if (has_magic(p, magic)) return Kind::kFatbinWrapper;
  if (has_magic(p, kElfMagic)) return Kind::kElf;
  return is_text_byte(p[0]) ? Kind::kPtx : Kind::kUnknown;
}

const void* resolve_wrapper(const void* image) {
  if (classify(image) != Kind::kFatbinWrapper) return image;
  return load<const void*>(static_cast<const uint8_t*>(image) + 8);
}

size_t image_size(const void* image) {
  switch (classify(image)) {
    case Kind::kUnknown:
      return 0;
    case Kind::kFatbinWrapper: {
      const void* fatbin = resolve_wrapper(image);
      return classify(fatbin) == Kind::kFatbin ? image_size(fatbin) : 0;
    }
    case Kind::kFatbin: {
      const size_t header_size = load<uint16_t>(static_cast<const uint8_t*>(image) + 6);
      const uint64_t files_size = load<uint64_t>(static_cast<const uint8_t*>(image) + 8);
      if (header_size < kFatbinHeaderSize || files_size > SIZE_MAX - header_size) return 0;
      return header_size + static_cast<size_t>(files_size);
    }
    case Kind::kElf:
      return trusted_elf_size(static_cast<const uint8_t*>(image));
    case Kind::kPtx:
      return std::strlen(static_cast<const char*>(image)) + 1;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Server side.

Kind classify(std::span<const uint8_t> image) {
  if (image.empty()) return Kind::kUnknown;
  if (image.size() >= 4) {
    const uint32_t magic = load<uint32_t>(image.data());
    if (magic == kFatbinMagic) return Kind::kFatbin;
    if (magic == kFatbinWrapperMagic) return Kind::kFatbinWrapper;
    if (has_magic(image.data(), kElfMagic)) return Kind::kElf;
  }
  return is_text_byte(image[0]) ? Kind::kPtx : Kind::kUnknown;
}

bool parse_fatbin(std::span<const uint8_t> fatbin, std::vector<FatbinEntry>* out,
                  std::string* error, const Limits& limits) {
  size_t decompressed_total = 0;
  size_t consumed = 0;
  if (!parse_one_fatbin(fatbin, limits, &decompressed_total, &consumed, out, error)) return false;
  // Further fatbins, each 8-byte aligned, as nvlink lays them out in .nv_fatbin.
  for (;;) {
    const size_t next = (consumed + 7) & ~size_t{7};
    if (next >= fatbin.size() || fatbin.size() - next < kFatbinHeaderSize) return true;
    const auto rest = fatbin.subspan(next);
    if (load<uint32_t>(rest.data()) != kFatbinMagic) return true;
    size_t used = 0;
    if (!parse_one_fatbin(rest, limits, &decompressed_total, &used, out, error)) return false;
    consumed = next + used;
  }
}

bool extract_ptx(std::span<const uint8_t> image, std::string* ptx, std::string* error,
                 uint32_t max_arch, const Limits& limits) {
  switch (classify(image)) {
    case Kind::kUnknown:
      return fail(error, "image is neither a fatbin, a cubin nor PTX text");
    case Kind::kFatbinWrapper:
      return fail(error, "image is a fatbin wrapper; the client must send the fatbin it points to");
    case Kind::kElf:
      return fail(error, "cubin holds no PTX");
    case Kind::kPtx:
      return ptx_text(image, ptx, error);
    case Kind::kFatbin:
      break;
  }
  std::vector<FatbinEntry> entries;
  if (!parse_fatbin(image, &entries, error, limits)) return false;
  const FatbinEntry* best = nullptr;
  for (const FatbinEntry& e : entries) {
    if (e.kind != EntryKind::kPtx || e.arch > max_arch) continue;
    if (best == nullptr || e.arch >= best->arch) best = &e;
  }
  if (best == nullptr) {
    return fail(error, max_arch == kAnyArch ? "fatbin holds no PTX"
                                            : "fatbin holds no PTX for compute_" +
                                                  std::to_string(max_arch) + " or older");
  }
  return ptx_text(best->payload, ptx, error);
}

bool elf_kernels(std::span<const uint8_t> elf, std::vector<ElfKernel>* out, std::string* error) {
  out->clear();
  ElfReader reader;
  std::vector<Symbol> symbols;
  if (!reader.open(elf, error) || !reader.symbols(&symbols, error)) return false;
  std::map<uint32_t, size_t> kernel_of_symbol;  // symbol index → index in *out
  for (size_t i = 0; i < symbols.size(); ++i) {
    const Symbol& s = symbols[i];
    if (ELF64_ST_TYPE(s.sym.st_info) != STT_FUNC || (s.sym.st_other & kStoCudaEntry) == 0) {
      continue;
    }
    if (s.name.empty() || reader.section_of(s.sym) == nullptr) continue;
    ElfKernel k;
    k.name = std::string(s.name);
    if (!kernel_info(reader, &k, error)) return false;
    kernel_of_symbol[static_cast<uint32_t>(i)] = out->size();
    out->push_back(std::move(k));
  }
  // Register counts live in the module-wide .nv.info, keyed by symbol index.
  if (const Section* info = reader.find(".nv.info")) {
    const bool ok = for_each_info_record(*info, error, [&](const InfoRecord& r) {
      if (r.attribute != kEiattrRegcount || r.format != kEifmtSval || r.payload.size() < 8) {
        return true;
      }
      const auto it = kernel_of_symbol.find(load<uint32_t>(r.payload.data()));
      if (it != kernel_of_symbol.end()) {
        (*out)[it->second].num_regs = load<uint32_t>(r.payload.data() + 4);
      }
      return true;
    });
    if (!ok) return false;
  }
  return true;
}

bool elf_globals(std::span<const uint8_t> elf, std::vector<ElfGlobal>* out, std::string* error) {
  out->clear();
  ElfReader reader;
  std::vector<Symbol> symbols;
  if (!reader.open(elf, error) || !reader.symbols(&symbols, error)) return false;
  for (const Symbol& s : symbols) {
    if (ELF64_ST_TYPE(s.sym.st_info) != STT_OBJECT || s.name.empty()) continue;
    const Section* section = reader.section_of(s.sym);
    if (section == nullptr) continue;
    const bool global = section->name.starts_with(".nv.global");
    const bool constant = section->name.starts_with(".nv.constant");
    if (!global && !constant) continue;
    ElfGlobal g;
    g.name = std::string(s.name);
    g.section = std::string(section->name);
    g.offset = s.sym.st_value;
    g.size = s.sym.st_size;
    g.constant = constant;
    out->push_back(std::move(g));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Module-scope variables

namespace {

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Bytes of a PTX fundamental type (".u32" -> 4); 0 for names that are not one (.texref ...).
uint64_t ptx_type_bytes(std::string_view t) {
  if (t == ".b8" || t == ".u8" || t == ".s8" || t == ".pred") return 1;
  if (t == ".b16" || t == ".u16" || t == ".s16" || t == ".f16" || t == ".bf16") return 2;
  if (t == ".b32" || t == ".u32" || t == ".s32" || t == ".f32" || t == ".f16x2" || t == ".bf16x2" ||
      t == ".tf32") {
    return 4;
  }
  if (t == ".b64" || t == ".u64" || t == ".s64" || t == ".f64") return 8;
  if (t == ".b128") return 16;
  return 0;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// One module-scope statement (without its ';'): the bytes it defines.
uint64_t statement_bytes(std::string_view st) {
  std::vector<std::string_view> words;
  for (size_t i = 0; i < st.size();) {
    while (i < st.size() && is_space(st[i])) ++i;
    size_t j = i;
    while (j < st.size() && !is_space(st[j])) ++j;
    if (j > i) words.push_back(st.substr(i, j - i));
    i = j;
  }
  // Directives that end at the line's end (.version, .target, .address_size, .file) run into
  // the statement that follows them: it starts at its first linkage or state-space word.
  auto starts = [](std::string_view w) {
    return w == ".extern" || w == ".visible" || w == ".weak" || w == ".common" || w == ".global" ||
           w == ".const";
  };
  size_t k = 0;
  while (k < words.size() && !starts(words[k])) ++k;
  bool data = false;
  uint64_t elem = 0, vec = 1;
  for (; k < words.size(); ++k) {
    std::string_view w = words[k];
    if (w == ".extern") return 0;  // defined elsewhere
    if (w == ".global" || w == ".const") {
      data = true;
    } else if (w == ".align") {
      ++k;
    } else if (w == ".v2" || w == ".v4" || w == ".v8") {
      vec = static_cast<uint64_t>(w[2] - '0');
    } else if (w == ".visible" || w == ".weak" || w == ".common") {
    } else if (w.size() > 1 && w[0] == '.') {
      elem = ptx_type_bytes(w);
      ++k;
      break;
    } else {
      return 0;
    }
  }
  if (!data || elem == 0) return 0;
  // The declarators: `name`, `name[4][8]`, separated by commas; an initializer ends them.
  std::string rest;
  for (; k < words.size(); ++k) rest += words[k];
  rest = rest.substr(0, rest.find('='));
  uint64_t total = 0;
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t end = rest.find(',', pos);
    if (end == std::string::npos) end = rest.size();
    std::string_view d(rest.data() + pos, end - pos);
    uint64_t n = sat_mul(elem, vec);
    for (size_t b = d.find('['); b != std::string_view::npos; b = d.find('[', b + 1)) {
      uint64_t dim = 0;
      size_t c = b + 1;
      for (; c < d.size() && d[c] >= '0' && d[c] <= '9'; ++c) {
        dim = sat_add(sat_mul(dim, 10), static_cast<uint64_t>(d[c] - '0'));
      }
      // `name[]` takes its size from an initializer the driver counts; nothing is charged.
      n = c == b + 1 ? 0 : sat_mul(n, dim);
    }
    if (!d.empty()) total = sat_add(total, n);
    pos = end + 1;
  }
  return total;
}

}  // namespace

uint64_t ptx_global_bytes(std::string_view ptx) {
  uint64_t total = 0;
  std::string st;  // the module-scope statement so far, comments left out
  int body = 0;    // brace depth inside a function body
  int init = 0;    // brace depth inside an initializer
  for (size_t i = 0; i < ptx.size(); ++i) {
    const char c = ptx[i];
    if (c == '/' && i + 1 < ptx.size() && ptx[i + 1] == '/') {
      while (i < ptx.size() && ptx[i] != '\n') ++i;
      st += ' ';
      continue;
    }
    if (c == '/' && i + 1 < ptx.size() && ptx[i + 1] == '*') {
      const size_t end = ptx.find("*/", i + 2);
      i = end == std::string_view::npos ? ptx.size() : end + 1;
      st += ' ';
      continue;
    }
    if (body > 0) {
      if (c == '{') ++body;
      if (c == '}') --body;
      continue;
    }
    if (c == '{') {
      if (init > 0 || st.find('=') != std::string::npos) {
        ++init;
        st += c;
      } else {
        body = 1;  // a function body: nothing in it is module scope
        st.clear();
      }
      continue;
    }
    if (c == '}' && init > 0) {
      --init;
      st += c;
      continue;
    }
    if (c == ';' && init == 0) {
      total = sat_add(total, statement_bytes(st));
      st.clear();
      continue;
    }
    // Only the declaration's head matters; an initializer's elements are not kept.
    if (init == 0) st += c;
  }
  return total;
}

bool elf_global_bytes(std::span<const uint8_t> elf, uint64_t* out, std::string* error) {
  std::vector<ElfGlobal> globals;
  if (!elf_globals(elf, &globals, error)) return false;
  *out = 0;
  for (const ElfGlobal& g : globals) *out = sat_add(*out, g.size);
  return true;
}

bool entries_global_bytes(const std::vector<FatbinEntry>& entries, uint64_t* out,
                          std::string* error) {
  *out = 0;
  for (const FatbinEntry& e : entries) {
    if (e.kind == EntryKind::kElf) return elf_global_bytes(e.payload, out, error);
  }
  const FatbinEntry* ptx = nullptr;
  for (const FatbinEntry& e : entries) {
    if (e.kind == EntryKind::kPtx && (!ptx || e.arch >= ptx->arch)) ptx = &e;
  }
  if (!ptx) return true;
  std::string text;
  if (!ptx_text(ptx->payload, &text, error)) return false;
  *out = ptx_global_bytes(text);
  return true;
}

}  // namespace cuwire::image
