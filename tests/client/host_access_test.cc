// The host-buffer check every copy goes through (client-lib/core/host_access.h): each kind of bad
// pointer is found, good buffers pass untouched: as the library checks (large ranges asking
// about their mappings first), page by page with the pipe, and with process_vm_readv.

#include "client-lib/core/host_access.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

#include <cstring>
#include <vector>

namespace cuwire::client {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// `pages` readable and writable pages followed by one inaccessible guard page.
class Guarded {
 public:
  explicit Guarded(size_t pages) : pages_(pages) {
    base_ = static_cast<char*>(mmap(nullptr, (pages + 1) * kPage, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + pages * kPage, kPage, PROT_NONE), 0);
  }
  ~Guarded() { munmap(base_, (pages_ + 1) * kPage); }
  char* begin() const { return base_; }
  char* end() const { return base_ + pages_ * kPage; }  // the guard page

 private:
  size_t pages_;
  char* base_;
};

enum class Mode { kLibrary, kPipe, kVmReadv };

void set_mode(HostPageProbe& probe, Mode m) {
  if (m == Mode::kPipe) probe.use_pages_only_for_testing();
  if (m == Mode::kVmReadv) probe.use_vm_readv_for_testing();
}

class HostPageProbeTest : public ::testing::TestWithParam<Mode> {
 protected:
  bool check(const void* p, size_t n, HostAccess a) {
    HostPageProbe probe(a);
    set_mode(probe, GetParam());
    probe.add(p, n);
    return probe.ok();
  }
};

TEST_P(HostPageProbeTest, GoodBuffersPassUnchanged) {
  std::vector<char> v(3 * kPage + 17);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(i * 7);
  std::vector<char> copy = v;
  EXPECT_TRUE(check(v.data(), v.size(), HostAccess::kRead));
  EXPECT_TRUE(check(v.data() + 5, v.size() - 5, HostAccess::kReadWrite));
  EXPECT_EQ(v, copy);
  EXPECT_TRUE(check(nullptr, 0, HostAccess::kRead));  // an empty copy needs no buffer
  Guarded g(2);
  EXPECT_TRUE(check(g.end() - 64, 64, HostAccess::kReadWrite));  // up to the last byte
}

TEST_P(HostPageProbeTest, BadPointersFail) {
  EXPECT_FALSE(check(nullptr, 64, HostAccess::kRead));
  EXPECT_FALSE(check(reinterpret_cast<void*>(kPage), 64, HostAccess::kRead));  // never mapped
  Guarded g(2);
  EXPECT_FALSE(check(g.end(), 1, HostAccess::kRead));
  EXPECT_FALSE(check(g.end() - 32, 64, HostAccess::kRead));  // runs into the guard
  EXPECT_FALSE(check(g.end() - 32, 64, HostAccess::kReadWrite));
  // Wrapping around the address space.
  EXPECT_FALSE(check(g.begin(), SIZE_MAX, HostAccess::kRead));
}

TEST_P(HostPageProbeTest, ReadOnlyIsReadableNotWritable) {
  void* ro = mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_TRUE(check(ro, kPage, HostAccess::kRead));
  EXPECT_FALSE(check(ro, 16, HostAccess::kReadWrite));
  munmap(ro, kPage);
}

// More pages than one batch of the probe (1024), the bad one last.
TEST_P(HostPageProbeTest, LargeRangesAreCheckedToTheEnd) {
  Guarded g(2500);
  std::memset(g.begin(), 1, 2500 * kPage);
  EXPECT_TRUE(check(g.begin(), 2500 * kPage, HostAccess::kReadWrite));
  EXPECT_FALSE(check(g.begin(), 2500 * kPage + 1, HostAccess::kRead));
  EXPECT_FALSE(check(g.begin() + 1, 2500 * kPage, HostAccess::kReadWrite));
}

TEST_P(HostPageProbeTest, SeveralRangesInOneProbe) {
  Guarded g(4);
  HostPageProbe probe(HostAccess::kRead);
  set_mode(probe, GetParam());
  for (int i = 0; i < 100; ++i) probe.add(g.begin() + i * 40, 16);  // rows sharing pages
  EXPECT_TRUE(probe.ok());
  probe.add(g.end() - 8, 16);
  EXPECT_FALSE(probe.ok());
}

// Large ranges with holes or mappings of other kinds inside: whatever answers, the verdict is
// the page probe's.
TEST_P(HostPageProbeTest, LargeRangesWithHolesAndOtherMappings) {
  const size_t pages = 512;  // 2 MiB with 4 KiB pages: past the mapping query's threshold
  Guarded g(pages);
  char* mid = g.begin() + pages / 2 * kPage;
  ASSERT_EQ(mprotect(mid, kPage, PROT_READ), 0);  // a read-only page in the middle
  EXPECT_TRUE(check(g.begin(), pages * kPage, HostAccess::kRead));
  EXPECT_FALSE(check(g.begin(), pages * kPage, HostAccess::kReadWrite));
  ASSERT_EQ(mprotect(mid, kPage, PROT_READ | PROT_WRITE), 0);
  EXPECT_TRUE(check(g.begin(), pages * kPage, HostAccess::kReadWrite));
  ASSERT_EQ(munmap(mid, kPage), 0);  // a hole
  EXPECT_FALSE(check(g.begin(), pages * kPage, HostAccess::kRead));
  EXPECT_TRUE(check(g.begin(), pages / 2 * kPage, HostAccess::kReadWrite));
  // File-backed memory (not the query's to answer), readable and writable.
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ftruncate(fileno(f), static_cast<off_t>(pages * kPage)), 0);
  void* m = mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_TRUE(check(m, pages * kPage, HostAccess::kReadWrite));
  // The file shrinks under the mapping: its last pages are past the end of the file.
  ASSERT_EQ(ftruncate(fileno(f), static_cast<off_t>(pages / 2 * kPage)), 0);
  EXPECT_FALSE(check(m, pages * kPage, HostAccess::kRead));
  munmap(m, pages * kPage);
  std::fclose(f);
}

INSTANTIATE_TEST_SUITE_P(Probe, HostPageProbeTest,
                         ::testing::Values(Mode::kLibrary, Mode::kPipe, Mode::kVmReadv),
                         [](const auto& info) {
                           return info.param == Mode::kLibrary ? "library"
                                  : info.param == Mode::kPipe  ? "pipe"
                                                               : "vm_readv";
                         });

// A large buffer in ordinary memory is answered by its mapping, without the page probe, where
// the kernel takes the query; a small one, and file-backed memory, go page by page.
TEST(HostAccessMappings, LargeAnonymousRangesSkipThePageProbe) {
  if (!mapping_query_supported()) GTEST_SKIP() << "this kernel has no PROCMAP_QUERY (Linux 6.11)";
  std::vector<char> big(16 << 20);
  HostPageProbe probe(HostAccess::kReadWrite);
  probe.add(big.data(), big.size());
  EXPECT_TRUE(probe.ok());
  EXPECT_EQ(probe.pages_probed(), 0u);
  HostPageProbe small(HostAccess::kRead);
  small.add(big.data(), 4096);
  EXPECT_TRUE(small.ok());
  EXPECT_GT(small.pages_probed(), 0u);
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ftruncate(fileno(f), 1 << 20), 0);
  void* m = mmap(nullptr, 1 << 20, PROT_READ, MAP_PRIVATE, fileno(f), 0);
  ASSERT_NE(m, MAP_FAILED);
  HostPageProbe file(HostAccess::kRead);
  file.add(m, 1 << 20);
  EXPECT_TRUE(file.ok());
  EXPECT_EQ(file.pages_probed(), (1u << 20) / kPage);
  munmap(m, 1 << 20);
  std::fclose(f);
}

}  // namespace
}  // namespace cuwire::client
