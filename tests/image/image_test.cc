// Tests for protocol/image.h on images nvcc builds from kernels.cu, and on hostile variants.
#include "protocol/image.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace cuwire::image {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes read_data(const std::string& name) {
  const std::string path = std::string(CUWIRE_IMAGE_TEST_DATA) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Mirrors __fatBinC_Wrapper_t.
struct Wrapper {
  int magic;
  int version;
  const void* data;
  void* filename_or_fatbins;
};

template <class T>
void store(Bytes* b, size_t offset, T v) {
  ASSERT_LE(offset + sizeof v, b->size());
  std::memcpy(b->data() + offset, &v, sizeof v);
}

// Offset of the index'th entry header of a single-fatbin image.
size_t entry_offset(const Bytes& fatbin, int index) {
  size_t off = 16;
  for (int i = 0; i < index; ++i) {
    uint32_t header_size;
    uint64_t payload_size;
    std::memcpy(&header_size, fatbin.data() + off + 4, 4);
    std::memcpy(&payload_size, fatbin.data() + off + 8, 8);
    off += header_size + payload_size;
  }
  return off;
}

const FatbinEntry* first_of(const std::vector<FatbinEntry>& entries, EntryKind kind) {
  for (const FatbinEntry& e : entries) {
    if (e.kind == kind) return &e;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Client side

TEST(ClassifyTest, EachKind) {
  const Bytes ptx = read_data("kernels.ptx");
  const Bytes cubin = read_data("kernels.cubin");
  const Bytes fatbin = read_data("default.fatbin");
  std::string ptx_str(ptx.begin(), ptx.end());  // NUL-terminated by std::string
  Wrapper w{static_cast<int>(kFatbinWrapperMagic), 1, fatbin.data(), nullptr};

  EXPECT_EQ(classify(ptx_str.c_str()), Kind::kPtx);
  EXPECT_EQ(classify(cubin.data()), Kind::kElf);
  EXPECT_EQ(classify(fatbin.data()), Kind::kFatbin);
  EXPECT_EQ(classify(&w), Kind::kFatbinWrapper);
  EXPECT_EQ(classify(static_cast<const void*>(nullptr)), Kind::kUnknown);
  const uint8_t binary[] = {0x01, 0x02, 0x03, 0x04};
  EXPECT_EQ(classify(binary), Kind::kUnknown);
  // A string shorter than any magic, starting like the fatbin magic ('P' = 0x50).
  EXPECT_EQ(classify("P"), Kind::kPtx);
  EXPECT_EQ(classify(""), Kind::kUnknown);

  EXPECT_EQ(classify(std::span<const uint8_t>(cubin)), Kind::kElf);
  EXPECT_EQ(classify(std::span<const uint8_t>(fatbin)), Kind::kFatbin);
  EXPECT_EQ(classify(std::span<const uint8_t>(ptx)), Kind::kPtx);
  EXPECT_EQ(classify(std::span<const uint8_t>()), Kind::kUnknown);
  EXPECT_EQ(classify(std::span<const uint8_t>(fatbin).first(3)), Kind::kPtx);
}

TEST(ImageSizeTest, MatchesFileSizes) {
  const Bytes ptx = read_data("kernels.ptx");
  std::string ptx_str(ptx.begin(), ptx.end());
  EXPECT_EQ(image_size(ptx_str.c_str()), ptx.size() + 1);

  for (const char* name :
       {"default.fatbin", "plain.fatbin", "lz4.fatbin", "zstd.fatbin", "multi.fatbin"}) {
    const Bytes fatbin = read_data(name);
    EXPECT_EQ(image_size(fatbin.data()), fatbin.size()) << name;
  }
  const Bytes cubin = read_data("kernels.cubin");
  EXPECT_EQ(image_size(cubin.data()), cubin.size());
  const uint8_t binary[] = {0x01, 0x02, 0x03, 0x04};
  EXPECT_EQ(image_size(binary), 0u);
}

TEST(ImageSizeTest, WrapperResolvesToItsFatbin) {
  const Bytes fatbin = read_data("default.fatbin");
  Wrapper w{static_cast<int>(kFatbinWrapperMagic), 1, fatbin.data(), nullptr};
  EXPECT_EQ(resolve_wrapper(&w), fatbin.data());
  EXPECT_EQ(image_size(&w), fatbin.size());
  // Non-wrappers resolve to themselves.
  EXPECT_EQ(resolve_wrapper(fatbin.data()), fatbin.data());
  Wrapper dangling{static_cast<int>(kFatbinWrapperMagic), 1, nullptr, nullptr};
  EXPECT_EQ(image_size(&dangling), 0u);
}

TEST(ImageSizeTest, ElfIgnoresTrailingBytes) {
  const Bytes cubin = read_data("kernels.cubin");
  Bytes padded = cubin;
  padded.resize(cubin.size() + 256, 0xee);
  EXPECT_EQ(image_size(padded.data()), cubin.size());
}

TEST(ImageSizeTest, ElfCountsSectionsPastTheTables) {
  // Grow the last file-backed section past the header tables: the size must follow it.
  Bytes cubin = read_data("kernels.cubin");
  uint64_t shoff;
  uint16_t shentsize;
  std::memcpy(&shoff, cubin.data() + 0x28, 8);
  std::memcpy(&shentsize, cubin.data() + 0x3a, 2);
  const size_t sh = shoff + size_t{1} * shentsize;  // section 1 (.shstrtab)
  uint64_t offset;
  std::memcpy(&offset, cubin.data() + sh + 0x18, 8);
  const uint64_t new_size = cubin.size() + 100 - offset;
  store<uint64_t>(&cubin, sh + 0x20, new_size);
  cubin.resize(cubin.size() + 100, 0);
  EXPECT_EQ(image_size(cubin.data()), cubin.size());
}

// ---------------------------------------------------------------------------------------------
// Fatbin parsing

TEST(ParseFatbinTest, DefaultHasElfAndZstdPtx) {
  const Bytes fatbin = read_data("default.fatbin");
  std::vector<FatbinEntry> entries;
  std::string error;
  ASSERT_TRUE(parse_fatbin(fatbin, &entries, &error)) << error;
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].kind, EntryKind::kElf);
  EXPECT_EQ(entries[0].arch, 75u);
  EXPECT_FALSE(entries[0].compressed);
  EXPECT_EQ(classify(std::span<const uint8_t>(entries[0].payload)), Kind::kElf);

  EXPECT_EQ(entries[1].kind, EntryKind::kPtx);
  EXPECT_EQ(entries[1].arch, 75u);
  EXPECT_TRUE(entries[1].compressed);
  EXPECT_EQ(entries[1].flags, 0x8011u);
  const std::string text(entries[1].payload.begin(), entries[1].payload.end());
  EXPECT_NE(text.find(".entry kern_a"), std::string::npos);
  EXPECT_NE(text.find(".target sm_75"), std::string::npos);
}

TEST(ParseFatbinTest, CompressedVariantsMatchPlain) {
  std::vector<FatbinEntry> plain;
  std::string error;
  ASSERT_TRUE(parse_fatbin(read_data("plain.fatbin"), &plain, &error)) << error;
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_FALSE(plain[0].compressed);
  EXPECT_FALSE(plain[1].compressed);

  for (const auto& [name, flag] : {std::pair{"lz4.fatbin", 0x2000u}, {"zstd.fatbin", 0x8000u}}) {
    SCOPED_TRACE(name);
    std::vector<FatbinEntry> entries;
    ASSERT_TRUE(parse_fatbin(read_data(name), &entries, &error)) << error;
    ASSERT_EQ(entries.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(entries[i].compressed);
      EXPECT_EQ(entries[i].flags & 0xa000u, flag);
      EXPECT_EQ(entries[i].kind, plain[i].kind);
      EXPECT_EQ(entries[i].arch, plain[i].arch);
    }
    // The ELF decompresses to exactly the uncompressed ELF; uncompressed payloads are padded
    // to 8 bytes, so compare the prefix.
    const Bytes& elf = entries[0].payload;
    ASSERT_LE(elf.size(), plain[0].payload.size());
    EXPECT_TRUE(std::equal(elf.begin(), elf.end(), plain[0].payload.begin()));
    std::string ptx, plain_ptx;
    ASSERT_TRUE(extract_ptx(read_data(name), &ptx, &error)) << error;
    ASSERT_TRUE(extract_ptx(read_data("plain.fatbin"), &plain_ptx, &error)) << error;
    EXPECT_EQ(ptx, plain_ptx);
  }
}

TEST(ParseFatbinTest, BackToBackFatbins) {
  const Bytes one = read_data("default.fatbin");
  Bytes two = one;
  two.insert(two.end(), one.begin(), one.end());
  std::vector<FatbinEntry> entries;
  std::string error;
  ASSERT_TRUE(parse_fatbin(two, &entries, &error)) << error;
  EXPECT_EQ(entries.size(), 4u);
}

// ---------------------------------------------------------------------------------------------
// extract_ptx

TEST(ExtractPtxTest, FromEveryImageKind) {
  std::string ptx, error;
  const Bytes text = read_data("kernels.ptx");
  ASSERT_TRUE(extract_ptx(text, &ptx, &error)) << error;
  EXPECT_EQ(ptx, std::string(text.begin(), text.end()));
  Bytes with_nul = text;
  with_nul.push_back(0);
  ASSERT_TRUE(extract_ptx(with_nul, &ptx, &error)) << error;
  EXPECT_EQ(ptx.size(), text.size());

  for (const char* name : {"default.fatbin", "plain.fatbin", "lz4.fatbin", "zstd.fatbin"}) {
    ASSERT_TRUE(extract_ptx(read_data(name), &ptx, &error)) << name << ": " << error;
    EXPECT_NE(ptx.find(".entry kern_empty"), std::string::npos) << name;
    EXPECT_EQ(ptx.find('\0'), std::string::npos) << name;
  }

  EXPECT_FALSE(extract_ptx(read_data("kernels.cubin"), &ptx, &error));
  EXPECT_EQ(error, "cubin holds no PTX");

  const Bytes fatbin = read_data("default.fatbin");
  Wrapper w{static_cast<int>(kFatbinWrapperMagic), 1, fatbin.data(), nullptr};
  const auto* wp = reinterpret_cast<const uint8_t*>(&w);
  EXPECT_FALSE(extract_ptx(std::span<const uint8_t>(wp, sizeof w), &ptx, &error));
  // What the client sends for a wrapper: the fatbin it points to.
  const auto* resolved = static_cast<const uint8_t*>(resolve_wrapper(&w));
  EXPECT_TRUE(extract_ptx(std::span<const uint8_t>(resolved, image_size(&w)), &ptx, &error))
      << error;
}

TEST(ExtractPtxTest, PicksHighestArchUpToMax) {
  const Bytes multi = read_data("multi.fatbin");
  std::vector<FatbinEntry> entries;
  std::string ptx, error;
  ASSERT_TRUE(parse_fatbin(multi, &entries, &error)) << error;
  std::vector<uint32_t> ptx_archs;
  for (const FatbinEntry& e : entries) {
    if (e.kind == EntryKind::kPtx) ptx_archs.push_back(e.arch);
  }
  EXPECT_EQ(ptx_archs, (std::vector<uint32_t>{75, 80, 86}));

  ASSERT_TRUE(extract_ptx(multi, &ptx, &error)) << error;
  EXPECT_NE(ptx.find(".target sm_86"), std::string::npos);
  ASSERT_TRUE(extract_ptx(multi, &ptx, &error, 85)) << error;
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
  EXPECT_FALSE(extract_ptx(multi, &ptx, &error, 70));
}

TEST(ExtractPtxTest, RejectsBinaryAndEmpty) {
  std::string ptx, error;
  const Bytes binary = {'.', 'v', 0x01, 0x02};
  EXPECT_FALSE(extract_ptx(binary, &ptx, &error));
  EXPECT_FALSE(extract_ptx(Bytes{}, &ptx, &error));
  EXPECT_FALSE(extract_ptx(Bytes{0, 0}, &ptx, &error));
}

// ---------------------------------------------------------------------------------------------
// Cubin metadata

const ElfKernel* find_kernel(const std::vector<ElfKernel>& kernels, const std::string& name) {
  for (const ElfKernel& k : kernels) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

void expect_params(const ElfKernel& k, const std::vector<std::pair<uint32_t, uint32_t>>& want) {
  ASSERT_EQ(k.params.size(), want.size()) << k.name;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(k.params[i].ordinal, i) << k.name;
    EXPECT_EQ(k.params[i].offset, want[i].first) << k.name << " param " << i;
    EXPECT_EQ(k.params[i].size, want[i].second) << k.name << " param " << i;
  }
}

void check_kernels(const Bytes& cubin) {
  std::vector<ElfKernel> kernels;
  std::string error;
  ASSERT_TRUE(elf_kernels(cubin, &kernels, &error)) << error;
  EXPECT_EQ(kernels.size(), 5u);

  const ElfKernel* a = find_kernel(kernels, "kern_a");
  ASSERT_NE(a, nullptr);
  expect_params(*a, {{0, 8}, {8, 4}, {16, 8}, {24, 24}});  // float*, int, double, Triple
  EXPECT_EQ(a->param_bytes, 48u);
  EXPECT_GT(a->param_bank_offset, 0u);
  EXPECT_GT(a->num_regs, 0u);

  const ElfKernel* b = find_kernel(kernels, "_Z6kern_bcsxPf");
  ASSERT_NE(b, nullptr);
  expect_params(*b, {{0, 1}, {2, 2}, {8, 8}, {16, 8}});  // char, short, long long, float*
  EXPECT_EQ(b->param_bytes, 24u);

  const ElfKernel* g = find_kernel(kernels, "kern_globals");
  ASSERT_NE(g, nullptr);
  expect_params(*g, {{0, 8}});

  const ElfKernel* e = find_kernel(kernels, "kern_empty");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->params.empty());
  EXPECT_EQ(e->param_bytes, 0u);

  const ElfKernel* big = find_kernel(kernels, "kern_big");
  ASSERT_NE(big, nullptr);
  expect_params(*big, {{0, 4}, {4, 20000}, {20008, 8}});  // int, Big, int*
  EXPECT_EQ(big->param_bytes, 20016u);
}

TEST(ElfTest, KernelParamLayout) { check_kernels(read_data("kernels.cubin")); }

TEST(ElfTest, KernelsOfFatbinElfEntries) {
  for (const char* name : {"default.fatbin", "lz4.fatbin", "zstd.fatbin"}) {
    SCOPED_TRACE(name);
    std::vector<FatbinEntry> entries;
    std::string error;
    ASSERT_TRUE(parse_fatbin(read_data(name), &entries, &error)) << error;
    const FatbinEntry* elf = first_of(entries, EntryKind::kElf);
    ASSERT_NE(elf, nullptr);
    check_kernels(elf->payload);
  }
  std::vector<FatbinEntry> entries;
  std::string error;
  ASSERT_TRUE(parse_fatbin(read_data("multi.fatbin"), &entries, &error)) << error;
  std::vector<uint32_t> elf_archs;
  for (const FatbinEntry& e : entries) {
    if (e.kind != EntryKind::kElf) continue;
    elf_archs.push_back(e.arch);
    SCOPED_TRACE(e.arch);
    check_kernels(e.payload);
  }
  EXPECT_EQ(elf_archs, (std::vector<uint32_t>{75, 90}));
}

TEST(ElfTest, Globals) {
  std::vector<ElfGlobal> globals;
  std::string error;
  ASSERT_TRUE(elf_globals(read_data("kernels.cubin"), &globals, &error)) << error;
  auto find = [&](const std::string& name) -> const ElfGlobal* {
    for (const ElfGlobal& g : globals) {
      if (g.name == name) return &g;
    }
    return nullptr;
  };
  const ElfGlobal* dev = find("g_dev");
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->size, 64u);
  EXPECT_EQ(dev->section, ".nv.global");
  EXPECT_FALSE(dev->constant);
  const ElfGlobal* init = find("g_init");
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->size, 4u);
  EXPECT_EQ(init->section.rfind(".nv.global", 0), 0u);
  const ElfGlobal* c = find("g_const");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->size, 32u);
  EXPECT_TRUE(c->constant);
  EXPECT_EQ(c->section.rfind(".nv.constant", 0), 0u);
  EXPECT_EQ(globals.size(), 3u);
}

// kernels.cu's g_dev (64 bytes), g_init (4) and g_const (32), counted the same way from every
// image kind nvcc makes of it.
TEST(GlobalBytesTest, SameFromEveryImageKind) {
  constexpr uint64_t kWant = 64 + 4 + 32;
  const Bytes ptx = read_data("kernels.ptx");
  EXPECT_EQ(ptx_global_bytes({reinterpret_cast<const char*>(ptx.data()), ptx.size()}), kWant);
  uint64_t n = 0;
  std::string error;
  ASSERT_TRUE(elf_global_bytes(read_data("kernels.cubin"), &n, &error)) << error;
  EXPECT_EQ(n, kWant);
  for (const char* name : {"default.fatbin", "lz4.fatbin", "zstd.fatbin", "multi.fatbin"}) {
    std::vector<FatbinEntry> entries;
    ASSERT_TRUE(parse_fatbin(read_data(name), &entries, &error)) << name << ": " << error;
    n = 0;
    ASSERT_TRUE(entries_global_bytes(entries, &n, &error)) << name << ": " << error;
    EXPECT_EQ(n, kWant) << name;
    // Without the ELF entries, the PTX entry's declarations count the same.
    std::erase_if(entries, [](const FatbinEntry& e) { return e.kind == EntryKind::kElf; });
    n = 0;
    ASSERT_TRUE(entries_global_bytes(entries, &n, &error)) << name << ": " << error;
    EXPECT_EQ(n, kWant) << name << " (PTX only)";
  }
}

TEST(GlobalBytesTest, PtxDeclarations) {
  EXPECT_EQ(ptx_global_bytes(".version 8.0\n.target sm_75\n.address_size 64\n"
                             ".visible .global .align 4 .b8 big[67108864];\n"),
            67108864u);
  // Dimensions, vectors, several declarators, initializers (braces included) and constants.
  EXPECT_EQ(ptx_global_bytes(".global .u32 m[4][8];"), 128u);
  EXPECT_EQ(ptx_global_bytes(".global .v4 .f32 v[2];"), 32u);
  EXPECT_EQ(ptx_global_bytes(".global .u64 a, b, c;"), 24u);
  EXPECT_EQ(ptx_global_bytes(".visible .const .align 4 .f32 k[3] = {1.0, 2.0, 3.0};\n"
                             ".global .u16 after;"),
            14u);
  // Nothing for declarations defined elsewhere, references, shared memory, comments and what
  // lies inside function bodies.
  EXPECT_EQ(ptx_global_bytes(".extern .global .align 4 .b8 elsewhere[4096];\n"
                             ".global .texref t;\n.global .surfref s;\n"
                             ".shared .align 4 .b8 sm[1024];\n"
                             "// .global .b8 commented[100];\n"
                             "/* .global .b8 also[100]; */\n"
                             ".visible .entry k(.param .u64 p)\n{\n  .local .b8 l[64];\n"
                             "  { .reg .b32 r; }\n  ret;\n}\n"),
            0u);
  EXPECT_EQ(ptx_global_bytes(".global .b8 huge[18446744073709551615][2];"), UINT64_MAX);
  EXPECT_EQ(ptx_global_bytes(""), 0u);
}

TEST(ElfTest, RejectsNonElf) {
  std::vector<ElfKernel> kernels;
  std::string error;
  EXPECT_FALSE(elf_kernels(read_data("kernels.ptx"), &kernels, &error));
  EXPECT_FALSE(elf_kernels(Bytes{0x7f, 'E', 'L', 'F'}, &kernels, &error));
}

// ---------------------------------------------------------------------------------------------
// Hostile input

TEST(HostileTest, EveryTruncationFails) {
  for (const char* name : {"default.fatbin", "lz4.fatbin", "zstd.fatbin"}) {
    const Bytes fatbin = read_data(name);
    for (size_t n = 0; n < fatbin.size(); ++n) {
      std::vector<FatbinEntry> entries;
      std::string error;
      EXPECT_FALSE(parse_fatbin(std::span<const uint8_t>(fatbin).first(n), &entries, &error))
          << name << " cut at " << n;
      EXPECT_FALSE(error.empty());
    }
  }
  const Bytes cubin = read_data("kernels.cubin");
  for (size_t n = 0; n < cubin.size(); n += 7) {
    std::vector<ElfKernel> kernels;
    std::string error;
    // Either a clean error or a smaller answer; never a read past the span (ASan checks).
    elf_kernels(std::span<const uint8_t>(cubin).first(n), &kernels, &error);
  }
}

TEST(HostileTest, HugeSizesInHeaders) {
  const Bytes good = read_data("default.fatbin");
  const size_t ptx = entry_offset(good, 1);
  std::vector<FatbinEntry> entries;
  std::string error;
  auto rejects = [&](Bytes b, const char* what) {
    entries.clear();
    error.clear();
    EXPECT_FALSE(parse_fatbin(b, &entries, &error)) << what;
    EXPECT_FALSE(error.empty()) << what;
  };

  Bytes b = good;
  store<uint64_t>(&b, 8, ~uint64_t{0});  // files_size
  rejects(b, "files_size");
  b = good;
  store<uint16_t>(&b, 6, 0xffff);  // header_size
  rejects(b, "header_size");
  b = good;
  store<uint16_t>(&b, 6, 4);
  rejects(b, "small header_size");
  b = good;
  store<uint32_t>(&b, 16 + 4, 0xffffffffu);  // entry header_size
  rejects(b, "entry header_size");
  b = good;
  store<uint32_t>(&b, 16 + 4, 8);
  rejects(b, "small entry header_size");
  b = good;
  store<uint64_t>(&b, 16 + 8, ~uint64_t{0} - 0x3f);  // payload_size: wraps if added
  rejects(b, "payload_size");
  b = good;
  store<uint64_t>(&b, ptx + 0x38, uint64_t{1} << 40);  // decompressed size over the limit
  rejects(b, "decompressed_size");
  b = good;
  store<uint64_t>(&b, ptx + 0x38, 100);  // smaller than the real output
  rejects(b, "decompressed_size too small");
  b = good;
  store<uint64_t>(&b, ptx + 0x38, 100000);  // larger than the real output
  rejects(b, "decompressed_size too large");
  b = good;
  store<uint64_t>(&b, ptx + 0x38, 0);
  rejects(b, "decompressed_size 0");
  b = good;
  store<uint32_t>(&b, ptx + 0x10, 0xfffffff0u);  // compressed size beyond the payload
  rejects(b, "compressed_size");
  b = good;
  store<uint64_t>(&b, ptx + 0x28, 0xa011);  // LZ4 and ZSTD at once
  rejects(b, "both compressions");

  // A limit below the PTX's real size.
  Limits tight;
  tight.max_decompressed = 64;
  EXPECT_FALSE(parse_fatbin(good, &entries, &error, tight));
  EXPECT_NE(error.find("limit"), std::string::npos) << error;
}

// The toolkit's own libraries (cuFFT) put entries of kind 8 beside their PTX: compressed-flagged
// payloads that are not plain LZ4. They are kept as stored, and the PTX next to them is read.
TEST(ParseFatbinTest, OtherKindEntriesAreKeptAsStored) {
  Bytes b = read_data("default.fatbin");
  const size_t elf = entry_offset(b, 0);
  store<uint16_t>(&b, elf + 0x00, 8);
  store<uint64_t>(&b, elf + 0x28, 0x12011);  // LZ4 flag set
  store<uint32_t>(&b, elf + 0x10, 16);       // a "compressed" size that does not decompress
  store<uint64_t>(&b, elf + 0x38, 4096);
  uint64_t payload_size = 0;
  std::memcpy(&payload_size, b.data() + elf + 0x08, sizeof payload_size);
  std::vector<FatbinEntry> entries;
  std::string error;
  ASSERT_TRUE(parse_fatbin(b, &entries, &error)) << error;
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].kind, EntryKind::kOther);
  EXPECT_EQ(entries[0].raw_kind, 8);
  EXPECT_EQ(entries[0].payload.size(), payload_size);
  EXPECT_EQ(entries[1].kind, EntryKind::kPtx);
  std::string ptx;
  ASSERT_TRUE(extract_ptx(b, &ptx, &error)) << error;
  EXPECT_NE(ptx.find(".entry"), std::string::npos);
  // The same bytes as a cubin entry are corrupt.
  store<uint16_t>(&b, elf + 0x00, 2);
  EXPECT_FALSE(parse_fatbin(b, &entries, &error));
}

TEST(HostileTest, CorruptCompressedPayloads) {
  for (const char* name : {"lz4.fatbin", "zstd.fatbin"}) {
    const Bytes good = read_data(name);
    for (int entry = 0; entry < 2; ++entry) {
      const size_t off = entry_offset(good, entry);
      uint32_t header_size;
      std::memcpy(&header_size, good.data() + off + 4, 4);
      Bytes b = good;
      for (size_t i = 0; i < 32; ++i) b[off + header_size + i] ^= 0x5a;  // garble the start
      std::vector<FatbinEntry> entries;
      std::string error;
      EXPECT_FALSE(parse_fatbin(b, &entries, &error)) << name << " entry " << entry;
      EXPECT_FALSE(error.empty());
      // Chop the compressed stream short.
      b = good;
      uint32_t csize;
      std::memcpy(&csize, good.data() + off + 0x10, 4);
      store<uint32_t>(&b, off + 0x10, csize / 2);
      EXPECT_FALSE(parse_fatbin(b, &entries, &error)) << name << " entry " << entry;
    }
  }
}

TEST(HostileTest, RandomAndMutatedInputsNeverCrash) {
  std::mt19937_64 rng(12345);
  const std::vector<Bytes> seeds = {read_data("default.fatbin"), read_data("lz4.fatbin"),
                                    read_data("zstd.fatbin"), read_data("kernels.cubin"),
                                    read_data("kernels.ptx")};
  Limits limits;
  limits.max_decompressed = 1 << 20;
  auto exercise = [&](const Bytes& b) {
    std::vector<FatbinEntry> entries;
    std::vector<ElfKernel> kernels;
    std::vector<ElfGlobal> globals;
    std::string ptx, error;
    const bool parsed = parse_fatbin(b, &entries, &error, limits);
    EXPECT_TRUE(parsed || !error.empty());
    if (parsed) {
      for (const FatbinEntry& e : entries) {
        if (e.kind == EntryKind::kElf) elf_kernels(e.payload, &kernels, &error);
      }
    }
    extract_ptx(b, &ptx, &error, kAnyArch, limits);
    elf_kernels(b, &kernels, &error);
    elf_globals(b, &globals, &error);
    classify(std::span<const uint8_t>(b));
  };
  for (int i = 0; i < 300; ++i) {
    Bytes b(rng() % 512);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    if (b.size() >= 4 && i % 2 == 0) store<uint32_t>(&b, 0, kFatbinMagic);
    exercise(b);
  }
  // Half the mutations land in headers: the fatbin header and first entry header, the second
  // entry header, the ELF header; the rest anywhere.
  // CUWIRE_IMAGE_FUZZ_ITERS raises the count for a longer local run.
  const char* iters_env = std::getenv("CUWIRE_IMAGE_FUZZ_ITERS");
  const long iters = iters_env != nullptr ? std::atol(iters_env) : 3000;
  for (long i = 0; i < iters; ++i) {
    const Bytes& seed = seeds[static_cast<size_t>(i) % seeds.size()];
    Bytes b = seed;
    const bool fatbin = b.size() >= 4 && classify(std::span<const uint8_t>(b)) == Kind::kFatbin;
    const size_t second = fatbin ? entry_offset(b, 1) : 0;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) {
      size_t at = rng() % b.size();
      if (rng() % 2 == 0) {
        at = (fatbin && rng() % 2 == 0 ? second : 0) + rng() % 0x60;
        at = std::min(at, b.size() - 1);
      }
      switch (rng() % 4) {
        case 0:
          b[at] = static_cast<uint8_t>(rng());
          break;
        case 1:
          b[at] = 0xff;
          break;
        case 2:
          b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        default:
          b[at] = 0;
          break;
      }
    }
    exercise(b);
  }
}

}  // namespace
}  // namespace cuwire::image
