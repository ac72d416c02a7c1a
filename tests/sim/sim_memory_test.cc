// Memory of the sim backend: allocation, capacity, copies, memsets, pointer attributes, pools.

#include <cstring>
#include <numeric>
#include <utility>

#include "tests/sim/sim_fixture.h"

namespace cuwire::server::testing {
namespace {

// A pool of pinned memory on device 0; a max_size of 0 leaves it unbounded.
CUmemPoolProps DevicePoolProps(size_t max_size) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  props.maxSize = max_size;
  return props;
}

TEST_F(SimTest, AllocationsAreAlignedAndDisjoint) {
  CUdeviceptr a, b;
  ASSERT_EQ(api_->cuMemAlloc_v2(&a, 100), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAlloc_v2(&b, 1), CUDA_SUCCESS);
  EXPECT_EQ(a % 256, 0u);
  EXPECT_EQ(b % 256, 0u);
  EXPECT_GE(b, a + 100);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(api_->cuMemGetAddressRange_v2(&base, &size, a + 50), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, 100u);
  EXPECT_EQ(api_->cuMemFree_v2(a), CUDA_SUCCESS);
  // Freed addresses are never handed out again.
  CUdeviceptr c;
  ASSERT_EQ(api_->cuMemAlloc_v2(&c, 100), CUDA_SUCCESS);
  EXPECT_NE(c, a);
  EXPECT_EQ(api_->cuMemGetAddressRange_v2(&base, &size, a), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(api_->cuMemAlloc_v2(&c, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimTest, OutOfMemoryAndBadFrees) {
  CUdeviceptr p;
  EXPECT_EQ(api_->cuMemAlloc_v2(&p, kSimMemory + 1), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api_->cuMemAlloc_v2(&p, kSimMemory / 2), CUDA_SUCCESS);
  CUdeviceptr q;
  EXPECT_EQ(api_->cuMemAlloc_v2(&q, kSimMemory / 2 + 256), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free = 0, total = 0;
  ASSERT_EQ(api_->cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kSimMemory);
  EXPECT_EQ(free, kSimMemory / 2);
  EXPECT_EQ(api_->cuMemFree_v2(p + 256), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuMemFree_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemAlloc_v2(&q, kSimMemory / 2 + 256), CUDA_SUCCESS);
}

TEST_F(SimTest, CopiesAndMemsets) {
  CUdeviceptr a, b;
  ASSERT_EQ(api_->cuMemAlloc_v2(&a, 1024), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAlloc_v2(&b, 1024), CUDA_SUCCESS);
  std::vector<uint8_t> in(1024), out(1024);
  std::iota(in.begin(), in.end(), 0);
  ASSERT_EQ(api_->cuMemcpyHtoD_v2(a, in.data(), in.size()), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoD_v2(b, a, 1024), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(out.data(), b, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  EXPECT_EQ(api_->cuMemcpyHtoD_v2(a + 1000, in.data(), 25), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuMemcpyDtoH_v2(out.data(), a - 1, 2), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(api_->cuMemsetD32_v2(a, 0xdeadbeef, 256), CUDA_SUCCESS);
  uint32_t w[256];
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(w, a, sizeof w), CUDA_SUCCESS);
  EXPECT_EQ(w[0], 0xdeadbeefu);
  EXPECT_EQ(w[255], 0xdeadbeefu);
  ASSERT_EQ(api_->cuMemsetD16_v2(a + 2, 0x1234, 3), CUDA_SUCCESS);
  uint16_t h[5];
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(h, a, sizeof h), CUDA_SUCCESS);
  EXPECT_EQ(h[0], 0xbeef);
  EXPECT_EQ(h[1], 0x1234);
  EXPECT_EQ(h[3], 0x1234);
  EXPECT_EQ(h[4], 0xbeef);
  EXPECT_EQ(api_->cuMemsetD32_v2(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_EQ(api_->cuMemsetD8_v2(a, 0, 1025), CUDA_ERROR_INVALID_VALUE);    // past the end
}

TEST_F(SimTest, PitchAnd2DCopies) {
  CUdeviceptr p;
  size_t pitch = 0;
  EXPECT_EQ(api_->cuMemAllocPitch_v2(&p, &pitch, 100, 8, 3), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuMemAllocPitch_v2(&p, &pitch, 100, 8, 4), CUDA_SUCCESS);
  EXPECT_GE(pitch, 100u);
  EXPECT_EQ(pitch % 32, 0u);

  // A 10x4 window of a 16x8 host image into the pitched allocation at (x=4, y=2).
  std::vector<uint8_t> img(16 * 8);
  std::iota(img.begin(), img.end(), 0);
  ASSERT_EQ(api_->cuMemsetD2D8_v2(p, pitch, 0xee, 100, 8), CUDA_SUCCESS);
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = img.data();
  c.srcPitch = 16;
  c.srcXInBytes = 1;
  c.srcY = 1;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = p;
  c.dstPitch = pitch;
  c.dstXInBytes = 4;
  c.dstY = 2;
  c.WidthInBytes = 10;
  c.Height = 4;
  ASSERT_EQ(api_->cuMemcpy2D_v2(&c), CUDA_SUCCESS);
  std::vector<uint8_t> back(pitch * 8);
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(back.data(), p, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back[2 * pitch + 3], 0xee);
  EXPECT_EQ(back[2 * pitch + 4], img[1 * 16 + 1]);
  EXPECT_EQ(back[5 * pitch + 13], img[4 * 16 + 10]);
  EXPECT_EQ(back[5 * pitch + 14], 0xee);
  EXPECT_EQ(back[6 * pitch + 4], 0xee);

  // Out of the allocation: too many rows.
  c.Height = 7;
  EXPECT_EQ(api_->cuMemcpy2D_v2(&c), CUDA_ERROR_INVALID_VALUE);
  // A pitch below the width is invalid.
  c.Height = 2;
  c.srcPitch = 5;
  EXPECT_EQ(api_->cuMemcpy2DUnaligned_v2(&c), CUDA_ERROR_INVALID_VALUE);

  // Device to host through the async path on a stream.
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::vector<uint8_t> rows(10 * 4);
  CUDA_MEMCPY2D d{};
  d.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  d.srcDevice = p;
  d.srcPitch = pitch;
  d.srcXInBytes = 4;
  d.srcY = 2;
  d.dstMemoryType = CU_MEMORYTYPE_HOST;
  d.dstHost = rows.data();
  d.dstPitch = 10;
  d.WidthInBytes = 10;
  d.Height = 4;
  ASSERT_EQ(api_->cuMemcpy2DAsync_v2(&d, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(rows[0], img[17]);
  EXPECT_EQ(rows[39], img[4 * 16 + 10]);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(SimTest, Copy3D) {
  // A 4x3x2 box out of a 8x4x3 device volume into a packed host buffer.
  const size_t w = 8, h = 4, depth = 3;
  CUdeviceptr vol;
  ASSERT_EQ(api_->cuMemAlloc_v2(&vol, w * h * depth), CUDA_SUCCESS);
  std::vector<uint8_t> src(w * h * depth);
  std::iota(src.begin(), src.end(), 0);
  ASSERT_EQ(api_->cuMemcpyHtoD_v2(vol, src.data(), src.size()), CUDA_SUCCESS);
  std::vector<uint8_t> box(4 * 3 * 2, 0);
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = vol;
  c.srcPitch = w;
  c.srcHeight = h;
  c.srcXInBytes = 2;
  c.srcY = 1;
  c.srcZ = 1;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = box.data();
  c.dstPitch = 4;
  c.dstHeight = 3;
  c.WidthInBytes = 4;
  c.Height = 3;
  c.Depth = 2;
  ASSERT_EQ(api_->cuMemcpy3D_v2(&c), CUDA_SUCCESS);
  for (size_t z = 0; z < 2; ++z)
    for (size_t y = 0; y < 3; ++y)
      for (size_t x = 0; x < 4; ++x)
        EXPECT_EQ(box[z * 12 + y * 4 + x], src[(z + 1) * w * h + (y + 1) * w + x + 2]);
  c.Depth = 3;  // runs past the volume
  EXPECT_EQ(api_->cuMemcpy3D_v2(&c), CUDA_ERROR_INVALID_VALUE);

  // Peer copy between devices, each side in its own context.
  CUcontext c1;
  ASSERT_EQ(api_->cuCtxCreate_v4(&c1, nullptr, 0, 1), CUDA_SUCCESS);
  CUdeviceptr other;
  ASSERT_EQ(api_->cuMemAlloc_v2(&other, 64), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyPeer(other, c1, vol, ctx_, 64), CUDA_SUCCESS);
  uint8_t got[64];
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(got, other, 64), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(got, src.data(), 64), 0);
  ASSERT_EQ(api_->cuCtxDestroy_v2(c1), CUDA_SUCCESS);
}

TEST_F(SimTest, HostMemoryAndPointerAttributes) {
  void* h = nullptr;
  ASSERT_EQ(api_->cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr alias = 0;
  ASSERT_EQ(api_->cuMemHostGetDevicePointer_v2(&alias, h, 0), CUDA_SUCCESS);
  std::memset(h, 0x5a, 4096);
  CUdeviceptr d;
  ASSERT_EQ(api_->cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpy(d, alias, 4096), CUDA_SUCCESS);
  uint8_t b = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&b, d + 100, 1), CUDA_SUCCESS);
  EXPECT_EQ(b, 0x5a);

  unsigned type = 0;
  ASSERT_EQ(api_->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_DEVICE});
  ASSERT_EQ(api_->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                        reinterpret_cast<CUdeviceptr>(h)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
  CUcontext owner = nullptr;
  ASSERT_EQ(api_->cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d + 5), CUDA_SUCCESS);
  EXPECT_EQ(owner, ctx_);
  CUdeviceptr start = 0;
  size_t size = 0;
  ASSERT_EQ(api_->cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 5),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 5),
            CUDA_SUCCESS);
  EXPECT_EQ(start, d);
  EXPECT_EQ(size, 4096u);
  int managed_flag = 0;
  bool managed = true;
  ASSERT_EQ(api_->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d),
            CUDA_SUCCESS);
  EXPECT_FALSE(managed);
  CUdeviceptr m;
  ASSERT_EQ(api_->cuMemAllocManaged(&m, 128, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m),
            CUDA_SUCCESS);
  EXPECT_TRUE(managed);
  (void)managed_flag;

  int local = 0;
  EXPECT_EQ(api_->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                        reinterpret_cast<CUdeviceptr>(&local)),
            CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
  unsigned t2 = 7;
  CUcontext c2 = ctx_;
  void* data[] = {&t2, &c2};
  EXPECT_EQ(api_->cuPointerGetAttributes(2, attrs, data, reinterpret_cast<CUdeviceptr>(&local)),
            CUDA_SUCCESS);
  EXPECT_EQ(t2, 0u);
  EXPECT_EQ(c2, nullptr);

  // Registration of caller memory.
  std::vector<uint8_t> buf(8192, 1);
  ASSERT_EQ(api_->cuMemHostRegister_v2(buf.data(), buf.size(), 0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemHostRegister_v2(buf.data() + 10, 10, 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(api_->cuMemHostUnregister(buf.data()), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemHostUnregister(buf.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(api_->cuMemFreeHost(h), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimTest, StreamOrderedAllocation) {
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr, def = nullptr;
  ASSERT_EQ(api_->cuDeviceGetDefaultMemPool(&def, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuDeviceGetMemPool(&pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(pool, def);
  CUdeviceptr p;
  ASSERT_EQ(api_->cuMemAllocAsync(&p, 1000, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8Async(p, 7, 1000, s), CUDA_SUCCESS);
  cuuint64_t used = 0;
  ASSERT_EQ(api_->cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
            CUDA_SUCCESS);
  EXPECT_GE(used, 1000u);
  CUmemoryPool got = nullptr;
  ASSERT_EQ(api_->cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p),
            CUDA_SUCCESS);
  EXPECT_EQ(got, def);
  ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
            CUDA_SUCCESS);
  EXPECT_EQ(used, 0u);

  CUmemPoolProps props = DevicePoolProps(0);
  CUmemoryPool mine;
  ASSERT_EQ(api_->cuMemPoolCreate(&mine, &props), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&p, 512, mine, s), CUDA_SUCCESS);
  cuuint64_t threshold = 1 << 20;
  EXPECT_EQ(api_->cuMemPoolSetAttribute(mine, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  // Device 1's access to the pool.
  auto access = [&] {
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_MAX;
    CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 1};
    EXPECT_EQ(api_->cuMemPoolGetAccess(&flags, mine, &loc), CUDA_SUCCESS);
    return flags;
  };
  EXPECT_EQ(access(), CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(api_->cuMemPoolSetAccess(mine, &desc, 1), CUDA_SUCCESS);
  EXPECT_EQ(access(), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemPoolDestroy(mine), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A pool made with a maximum size gives no more than that; freed memory may be had again.
TEST_F(SimTest, PoolWithAMaximumSizeHoldsNoMore) {
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUmemPoolProps props = DevicePoolProps(1 << 20);
  CUmemoryPool pool;
  ASSERT_EQ(api_->cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&a, 768 << 10, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemAllocFromPoolAsync(&b, 512 << 10, pool, s), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&c, 128 << 10, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemFreeAsync(a, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&b, 512 << 10, pool, s), CUDA_SUCCESS);
  for (CUdeviceptr d : {b, c}) ASSERT_EQ(api_->cuMemFreeAsync(d, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A pool holds the memory freed from it (its reserved figure) until a synchronisation finds it
// above its release threshold, or a trim; allocations take held memory first.
TEST_F(SimTest, PoolsHoldFreedMemoryUpToTheirReleaseThreshold) {
  const cuuint64_t mib = 1 << 20;
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUmemPoolProps props = DevicePoolProps(0);
  CUmemoryPool pool;
  ASSERT_EQ(api_->cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  auto attr = [&](CUmemPool_attribute a) {
    cuuint64_t v = ~cuuint64_t{0};
    EXPECT_EQ(api_->cuMemPoolGetAttribute(pool, a, &v), CUDA_SUCCESS);
    return v;
  };
  auto cycle = [&] {
    CUdeviceptr p = 0;
    ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&p, mib, pool, s), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  };
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0u);
  cuuint64_t keep = 4 * mib;
  ASSERT_EQ(api_->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
            CUDA_SUCCESS);
  cycle();
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), mib);
  cycle();  // the held MiB serves it
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), mib);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), mib);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), mib);
  // The device got the bytes back all the same: the figure is the pool's.
  size_t free = 0, total = 0;
  ASSERT_EQ(api_->cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, total);
  ASSERT_EQ(api_->cuMemPoolTrimTo(pool, mib / 2), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), mib / 2);
  ASSERT_EQ(api_->cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  // Marks restart at the current figures.
  cuuint64_t zero = 0;
  ASSERT_EQ(api_->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero),
            CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
  // Threshold 0: a synchronisation of any kind gives back what is freed.
  ASSERT_EQ(api_->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero),
            CUDA_SUCCESS);
  cycle();
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), mib);
  CUdeviceptr p = 0;
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&p, mib, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  // Memory in use is never given back.
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&p, mib, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), mib);
  ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// Reservations are address space only: far larger than the device's memory (a TiB and more, as
// on a GPU), apart from every allocation, mapped in pieces anywhere inside. Addresses are not
// handed out twice until the window is spent; then a freed reservation's are.
TEST_F(SimTest, AddressReservationsFarLargerThanTheDevice) {
  const size_t gib = size_t{1} << 30, tib = size_t{1} << 40;
  CUdeviceptr alloc = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&alloc, 4096), CUDA_SUCCESS);
  CUdeviceptr big = 0, half = 0;
  ASSERT_EQ(api_->cuMemAddressReserve(&big, tib, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAddressReserve(&half, 512 * gib, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_TRUE(half >= big + tib || half + 512 * gib <= big);
  EXPECT_TRUE(alloc + 4096 <= big || alloc >= big + tib);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  const size_t gran = 2 << 20;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(api_->cuMemCreate(&h, gran, &prop, 0), CUDA_SUCCESS);
  const CUdeviceptr at = big + 700 * gib;
  ASSERT_EQ(api_->cuMemMap(at, gran, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(api_->cuMemSetAccess(at, gran, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD8_v2(at, 0x3c, gran), CUDA_SUCCESS);
  unsigned char last = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&last, at + gran - 1, 1), CUDA_SUCCESS);
  EXPECT_EQ(last, 0x3c);
  EXPECT_EQ(api_->cuMemsetD8_v2(at + gran, 0, 1), CUDA_ERROR_INVALID_VALUE);  // not mapped
  ASSERT_EQ(api_->cuMemUnmap(at, gran), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemAddressFree(half, 512 * gib), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemAddressFree(big, tib), CUDA_SUCCESS);
  // More than one reservation may hold: refused. The window (48 TiB) spent, a freed range
  // serves again.
  CUdeviceptr r[3] = {};
  EXPECT_EQ(api_->cuMemAddressReserve(&r[0], 17 * tib, 0, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api_->cuMemAddressReserve(&r[0], 16 * tib, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAddressReserve(&r[1], 16 * tib, 0, 0, 0), CUDA_SUCCESS);
  CUdeviceptr more = 0;
  EXPECT_EQ(api_->cuMemAddressReserve(&more, 16 * tib, 0, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api_->cuMemAddressReserve(&r[2], 8 * tib, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemAddressFree(r[1], 16 * tib), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAddressReserve(&more, 7 * tib, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_GE(more, r[1]);
  EXPECT_LE(more + 7 * tib, r[1] + 16 * tib);
  for (auto [p, n] : {std::pair{r[0], 16 * tib}, {r[2], 8 * tib}, {more, 7 * tib}})
    EXPECT_EQ(api_->cuMemAddressFree(p, n), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(alloc), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing
