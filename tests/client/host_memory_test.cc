// The host-buffer check every copy goes through (client-lib/host_memory.h): each kind of bad
// pointer is found, good buffers pass untouched, with the pipe and with process_vm_readv.

#include "host_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

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

class HostMemory : public ::testing::TestWithParam<bool> {
 protected:
  bool check(const void* p, size_t n, HostAccess a) {
    HostPageProbe probe(a);
    if (GetParam()) probe.use_vm_readv_for_testing();
    probe.add(p, n);
    return probe.ok();
  }
};

TEST_P(HostMemory, GoodBuffersPassUnchanged) {
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

TEST_P(HostMemory, BadPointersFail) {
  EXPECT_FALSE(check(nullptr, 64, HostAccess::kRead));
  EXPECT_FALSE(check(reinterpret_cast<void*>(kPage), 64, HostAccess::kRead));  // never mapped
  Guarded g(2);
  EXPECT_FALSE(check(g.end(), 1, HostAccess::kRead));
  EXPECT_FALSE(check(g.end() - 32, 64, HostAccess::kRead));  // runs into the guard
  EXPECT_FALSE(check(g.end() - 32, 64, HostAccess::kReadWrite));
  // Wrapping around the address space.
  EXPECT_FALSE(check(g.begin(), SIZE_MAX, HostAccess::kRead));
}

TEST_P(HostMemory, ReadOnlyIsReadableNotWritable) {
  void* ro = mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_TRUE(check(ro, kPage, HostAccess::kRead));
  EXPECT_FALSE(check(ro, 16, HostAccess::kReadWrite));
  munmap(ro, kPage);
}

// More pages than one batch of the probe (1024), the bad one last.
TEST_P(HostMemory, LargeRangesAreCheckedToTheEnd) {
  Guarded g(2500);
  std::memset(g.begin(), 1, 2500 * kPage);
  EXPECT_TRUE(check(g.begin(), 2500 * kPage, HostAccess::kReadWrite));
  EXPECT_FALSE(check(g.begin(), 2500 * kPage + 1, HostAccess::kRead));
  EXPECT_FALSE(check(g.begin() + 1, 2500 * kPage, HostAccess::kReadWrite));
}

TEST_P(HostMemory, SeveralRangesInOneProbe) {
  Guarded g(4);
  HostPageProbe probe(HostAccess::kRead);
  if (GetParam()) probe.use_vm_readv_for_testing();
  for (int i = 0; i < 100; ++i) probe.add(g.begin() + i * 40, 16);  // rows sharing pages
  EXPECT_TRUE(probe.ok());
  probe.add(g.end() - 8, 16);
  EXPECT_FALSE(probe.ok());
}

INSTANTIATE_TEST_SUITE_P(Probe, HostMemory, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "vm_readv" : "pipe"; });

}  // namespace
}  // namespace cuwire::client
