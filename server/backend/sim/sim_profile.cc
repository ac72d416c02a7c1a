// The sim's device profiles (sim_profile.h). Figures follow the public compute-capability
// tables of the CUDA C++ Programming Guide for each generation; clocks, L2 and bus width are
// those of one typical board of that generation. Profiles of compute capability 9.0 and later
// launch thread-block clusters (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH 1).

#include "server/backend/sim/sim_profile.h"

#include <iterator>

namespace cuwire::server::sim {
namespace {

constexpr SimProfile kProfiles[] = {
    // The default: the generation the interpreter's PTX subset was written against.
    {"sm_75", "compute capability 7.5 (Turing-class; the default)", "cuwire sim GPU (sm_75)", 7, 5,
     64 << 10, 64 << 10, 1024, 16, 4 << 20, 1590000, 5001000, 256, 32, 0x1eb810de},
    // Hopper-class: thread-block clusters (cluster launches, shared::cluster, cluster barriers).
    {"sm_90", "compute capability 9.0 (Hopper-class; thread-block clusters)",
     "cuwire sim GPU (sm_90)", 9, 0, 227 << 10, 228 << 10, 2048, 32, 50 << 20, 1755000, 2619000,
     5120, 2, 0x233010de},
    // cuBLAS and cuBLASLt 13 carry PTX for compute_120 only; cuFFT's compute_75 PTX runs here
    // too.
    {"sm_120", "compute capability 12.0 (Blackwell-class; runs cuBLAS's PTX)",
     "cuwire sim GPU (sm_120)", 12, 0, 99 << 10, 100 << 10, 1536, 32, 96 << 20, 2407000, 14001000,
     512, 64, 0x2b8510de},
    // cuSOLVER 13 carries PTX for compute_121 (and cuBLAS's compute_120 PTX runs on 12.1).
    {"sm_121", "compute capability 12.1 (Blackwell-class; runs cuBLAS's and cuSOLVER's PTX)",
     "cuwire sim GPU (sm_121)", 12, 1, 99 << 10, 100 << 10, 1536, 32, 24 << 20, 2418000, 8533000,
     256, 64, 0x2e1210de},
    // A generation newer than any this toolkit carries SASS for, as a GPU released after it
    // would be: the libraries then take the kernels they ship as PTX for exactly that case
    // (cuBLAS's "forwardCompat" GEMMs), where at 12.x they pick SASS-only ones. Limits as 12.x;
    // no real board, so no PCI device id.
    {"next",
     "compute capability 13.0, newer than the toolkit's SASS: libraries run their PTX "
     "(cuBLAS GEMMs, cuSOLVER, cuFFT)",
     "cuwire sim GPU (next generation, compute 13.0)", 13, 0, 99 << 10, 100 << 10, 1536, 32,
     96 << 20, 2400000, 14001000, 512, 64, 0x000010de},
};

}  // namespace

std::span<const SimProfile> sim_profiles() { return kProfiles; }

const SimProfile* find_sim_profile(std::string_view name) {
  for (const SimProfile& p : kProfiles)
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace cuwire::server::sim
