// Device printf: the formatter on its own (over a fake device), then kernels nvcc compiled.

#include <cstring>
#include <map>

#include "server/backend/sim/ptx/device_printf.h"
#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

// A device with a few byte ranges at fixed addresses; everything else is unreadable.
class FakeDevice {
 public:
  uint64_t Put(const void* p, size_t n) {
    uint64_t addr = next_;
    next_ += (n + 63) / 64 * 64 + 4096;
    ranges_[addr].assign(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return addr;
  }
  uint64_t PutString(const std::string& s) { return Put(s.c_str(), s.size() + 1); }

  DeviceReader Reader() {
    return [this](uint64_t a, void* dst, size_t n) {
      auto it = ranges_.upper_bound(a);
      if (it == ranges_.begin()) return false;
      --it;
      uint64_t off = a - it->first;
      if (off > it->second.size() || n > it->second.size() - off) return false;
      std::memcpy(dst, it->second.data() + off, n);
      return true;
    };
  }

 private:
  uint64_t next_ = 0x10000;
  std::map<uint64_t, std::vector<uint8_t>> ranges_;
};

// Packs arguments as nvcc does: each at its natural alignment.
class ArgBuffer {
 public:
  template <class T>
  ArgBuffer& Add(T v) {
    size_t off = (bytes_.size() + sizeof(T) - 1) / sizeof(T) * sizeof(T);
    bytes_.resize(off + sizeof(T));
    std::memcpy(bytes_.data() + off, &v, sizeof(T));
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

std::string Format(FakeDevice& dev, const std::string& fmt, const ArgBuffer& args,
                   int* value = nullptr, size_t room = kPrintfBufferBytes) {
  uint64_t f = dev.PutString(fmt);
  uint64_t a = args.bytes().empty() ? 0 : dev.Put(args.bytes().data(), args.bytes().size());
  std::string out;
  PrintfResult r = FormatDevicePrintf(dev.Reader(), f, a, room, &out);
  EXPECT_FALSE(r.fault) << fmt;
  if (value) *value = r.value;
  return out;
}

TEST(DevicePrintf, IntegersAndLengthModifiers) {
  FakeDevice dev;
  int v = 0;
  EXPECT_EQ(Format(dev, "%d %i %u %x %X %o|%5d|%-5d|%05d|%+d",
                   ArgBuffer()
                       .Add(-3)
                       .Add(7)
                       .Add(4000000000u)
                       .Add(255)
                       .Add(255)
                       .Add(8)
                       .Add(42)
                       .Add(42)
                       .Add(42)
                       .Add(42),
                   &v),
            "-3 7 4000000000 ff FF 10|   42|42   |00042|+42");
  EXPECT_EQ(v, 10);
  // A 4-byte int followed by an 8-byte long: the long sits at offset 8.
  EXPECT_EQ(Format(dev, "%d %ld %lld %lu %llu %llx %hd %hhu",
                   ArgBuffer()
                       .Add(1)
                       .Add(int64_t{-1234567890123})
                       .Add(int64_t{-5})
                       .Add(uint64_t{42})
                       .Add(uint64_t{18446744073709551615ull})
                       .Add(uint64_t{0x123456789abcdef0ull})
                       .Add(70000)
                       .Add(300)),
            "1 -1234567890123 -5 42 18446744073709551615 123456789abcdef0 4464 44");
}

TEST(DevicePrintf, FloatsCharsStringsPointers) {
  FakeDevice dev;
  uint64_t s = dev.PutString("device!");
  EXPECT_EQ(
      Format(dev, "%f %e %g %.2f [%8.3f] %c%c",
             ArgBuffer().Add(1.5).Add(-2.25).Add(0.0001).Add(3.14159).Add(1.5).Add(int{'o'}).Add(
                 int{'k'})),
      "1.500000 -2.250000e+00 0.0001 3.14 [   1.500] ok");
  EXPECT_EQ(Format(dev, "%s|%.3s|%-9s|%s|%p|%%|%*d|%.*f",
                   ArgBuffer()
                       .Add(s)
                       .Add(s)
                       .Add(s)
                       .Add(uint64_t{0})
                       .Add(uint64_t{0x1234})
                       .Add(4)
                       .Add(7)
                       .Add(1)
                       .Add(2.25)),
            "device!|dev|device!  |(null)|0x1234|%|   7|2.2");
  int v = -5;
  EXPECT_EQ(Format(dev, "no arguments %q\n", ArgBuffer(), &v), "no arguments %q\n");
  EXPECT_EQ(v, 0);
}

TEST(DevicePrintf, FaultsAndLimits) {
  FakeDevice dev;
  // %s pointing at nothing readable faults, naming the address.
  uint64_t f = dev.PutString("[%s]");
  ArgBuffer args;
  args.Add(uint64_t{0x999999});
  uint64_t a = dev.Put(args.bytes().data(), args.bytes().size());
  std::string out;
  PrintfResult r = FormatDevicePrintf(dev.Reader(), f, a, kPrintfBufferBytes, &out);
  EXPECT_TRUE(r.fault);
  EXPECT_EQ(r.fault_addr, 0x999999u);
  EXPECT_EQ(out, "");
  // A string that runs to the end of its allocation without a NUL faults just past it.
  char raw[70];
  std::memset(raw, 'x', sizeof raw);
  uint64_t unterminated = dev.Put(raw, sizeof raw);
  ArgBuffer args2;
  args2.Add(unterminated);
  a = dev.Put(args2.bytes().data(), args2.bytes().size());
  r = FormatDevicePrintf(dev.Reader(), f, a, kPrintfBufferBytes, &out);
  EXPECT_TRUE(r.fault);
  EXPECT_EQ(r.fault_addr, unterminated + sizeof raw);
  // ... but a precision bounds the read.
  EXPECT_EQ(Format(dev, "%.70s", ArgBuffer().Add(unterminated)), std::string(70, 'x'));
  // Null format: -1, nothing printed.
  r = FormatDevicePrintf(dev.Reader(), 0, 0, kPrintfBufferBytes, &out);
  EXPECT_FALSE(r.fault);
  EXPECT_EQ(r.value, -1);
  // Missing argument buffer: what precedes the conversion is printed, the call returns -1.
  int v = 0;
  EXPECT_EQ(Format(dev, "a %d b", ArgBuffer(), &v), "a ");
  EXPECT_EQ(v, -1);
  // Output is cut at `room`; huge widths are clamped.
  EXPECT_EQ(Format(dev, "abcdef", ArgBuffer(), nullptr, 3), "abc");
  EXPECT_EQ(Format(dev, "%999999999d", ArgBuffer().Add(1)).size(), 4096u);
}

TEST(DevicePrintf, NvccKernelsPrintInLaunchOrder) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("printf", mem);
  ASSERT_TRUE(m.module);
  uint64_t ret = mem.Alloc(4 * sizeof(int));
  LaunchResult r = Launch(m, mem, "hello", {2, 1, 1}, {2, 1, 1}, 0, ret);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(r.printf_output,
            "hello from block 0 thread 0\nhello from block 0 thread 1\n"
            "hello from block 1 thread 0\nhello from block 1 thread 1\n");
  EXPECT_EQ(mem.Download<int>(ret, 4), (std::vector<int>{2, 2, 2, 2}));

  std::string s = "device!";
  uint64_t dev_s = mem.Upload(std::vector<char>(s.begin(), s.end() + 1));
  r = Launch(m, mem, "types", {1, 1, 1}, {1, 1, 1}, 0, dev_s,
             static_cast<unsigned long long>(0x123456789abcdef0ull));
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(r.printf_output,
            "i=-7 u=4000000000 x=ff X=FF o=10 c=Z\n"
            "ld=-1234567890123 lld=-5 lu=42 llu=1311768467463790320 llx=123456789abcdef0\n"
            "f=1.500000 e=-2.250000e+00 g=0.0001 .2f=-2.25 w=[   1.500] [12    ] [000034] [+5]\n"
            "s=device! .3s=dev [   ab] p=0x1234 %\n"
            "no args\n");

  // A bad %s pointer fails the launch with an illegal address; output before it is kept.
  r = Launch(m, mem, "types", {1, 1, 1}, {1, 1, 1}, 0, uint64_t{0x50},
             static_cast<unsigned long long>(1));
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("printf"), std::string::npos) << r.message;
  EXPECT_EQ(r.printf_output.substr(0, 2), "i=");
}

TEST(DevicePrintf, OutputIsCappedPerLaunch) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadKernelFile("printf", mem);
  ASSERT_TRUE(m.module);
  // 40000 threads x 28 bytes > 1 MiB.
  uint64_t ret = mem.Alloc(40000 * sizeof(int));
  LaunchResult r = Launch(m, mem, "hello", {40, 1, 1}, {1000, 1, 1}, 0, ret);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(r.printf_output.size(), kPrintfBufferBytes);
}

}  // namespace
}  // namespace cuwire::ptx::testing
