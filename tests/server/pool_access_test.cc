// A pool's grant of another device on a backend whose contexts all belong to the server's one
// process (the driver): it would reach every session's contexts on that device, so the server
// refuses it (verify_pool_access); a grant the pool has already, and a revocation, pass. So
// does a relay, whose sessions share one upstream session. The sim, which keeps sessions apart
// itself, decides alone.

#include <gtest/gtest.h>

#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

// A driver whose pools reach device 0 only.
class OneDevicePools : public server::Backend {
 public:
  CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool,
                              CUmemLocation* where) override {
    *flags = where->type == CU_MEM_LOCATION_TYPE_DEVICE && where->id == 0
                 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
  }
};

CUmemAccessDesc access(int device, CUmemAccess_flags flags) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = flags;
  return d;
}

TEST(PoolAccess, AGrantOfAnotherDeviceIsRefusedWhereSessionsShareTheProcess) {
  OneDevicePools api;
  SessionContext cx(api);
  auto* pool = reinterpret_cast<CUmemoryPool>(uintptr_t{0x1000});
  const CUmemAccessDesc own = access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const CUmemAccessDesc other = access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const CUmemAccessDesc revoke = access(1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  const CUmemAccessDesc both[] = {own, other};
  EXPECT_EQ(verify_pool_access(cx, pool, &own, 1), CUDA_SUCCESS);
  EXPECT_EQ(verify_pool_access(cx, pool, &revoke, 1), CUDA_SUCCESS);
  EXPECT_EQ(verify_pool_access(cx, pool, &other, 1), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(verify_pool_access(cx, pool, both, 2), CUDA_ERROR_NOT_SUPPORTED);
  // A relay whose sessions are one session of its upstream server, which cannot keep them
  // apart: the same refusal (a pool grant through it reached other tenants' kernels).
  cx.set_relay();
  EXPECT_EQ(verify_pool_access(cx, pool, &other, 1), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(verify_pool_access(cx, pool, &own, 1), CUDA_SUCCESS);
  // A relay session with an upstream session of its own: its upstream decides.
  SessionContext apart(api);
  apart.set_relay(true);
  EXPECT_EQ(verify_pool_access(apart, pool, &other, 1), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server
