// What the app told the driver about managed memory (cuMemAdvise) and where it last asked for
// it to be prefetched (cuMemPrefetchAsync), page by page, so that cuMemRangeGetAttribute(s)
// answers as CUDA does. Managed memory here has one home (the server's device) and a host
// mirror kept at synchronisation points: advice and prefetches move nothing, they are recorded.
// A range's record goes with its allocation (managed::forget).

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "client-lib/calls/managed_memory.h"
#include "client-lib/core/client_call.h"

namespace cuwire::client::managed {
namespace {

constexpr uint64_t kHostBit = uint64_t{1} << 63;  // ACCESSED_BY for the host
constexpr int kMaxDeviceBits = 63;

// The advice and prefetch record of a run of pages.
struct Advice {
  bool read_mostly = false;
  CUmemLocation preferred{CU_MEM_LOCATION_TYPE_INVALID, 0};
  uint64_t accessed_by = 0;  // device bits, kHostBit
  CUmemLocation prefetched{CU_MEM_LOCATION_TYPE_INVALID, 0};
  bool operator==(const Advice& o) const {
    return read_mostly == o.read_mostly && same(preferred, o.preferred) &&
           accessed_by == o.accessed_by && same(prefetched, o.prefetched);
  }
  static bool same(const CUmemLocation& a, const CUmemLocation& b) {
    return a.type == b.type && a.id == b.id;
  }
};

// Runs of pages, [start, end) by start, with a record; pages in no run have the default one.
struct Runs {
  std::mutex mu;
  std::map<uint64_t, std::pair<uint64_t, Advice>> by_start;  // guarded by mu
};
Runs& runs() {
  static Runs* r = new Runs();  // leaked: used by atexit handlers too
  return *r;
}

uint64_t page() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Splits the run holding `at` (if any) so that a run starts there. Called with mu held.
void split_at(Runs& r, uint64_t at) {
  auto it = r.by_start.upper_bound(at);
  if (it == r.by_start.begin()) return;
  --it;
  auto& [end, advice] = it->second;
  if (it->first == at || end <= at) return;
  r.by_start.emplace(at, std::make_pair(end, advice));
  end = at;
}

// Locks the runs and sets [*lo, *hi) to the pages of [p, p + n), whole pages around it; with
// `split`, a run across either end is split there. The lock is held until the result goes.
std::unique_lock<std::mutex> lock_pages(uint64_t p, uint64_t n, bool split, uint64_t* lo,
                                        uint64_t* hi) {
  *lo = p / page() * page();
  *hi = (p + n + page() - 1) / page() * page();
  Runs& r = runs();
  std::unique_lock lock(r.mu);
  if (split) {
    split_at(r, *lo);
    split_at(r, *hi);
  }
  return lock;
}

// Applies `change` to every page of [p, p + n), filling gaps with default records first.
template <typename Change>
void apply(uint64_t p, uint64_t n, Change&& change) {
  uint64_t lo = 0, hi = 0;
  const auto lock = lock_pages(p, n, true, &lo, &hi);
  Runs& r = runs();
  uint64_t at = lo;
  auto it = r.by_start.lower_bound(lo);
  while (at < hi) {
    if (it == r.by_start.end() || it->first > at) {
      const uint64_t gap_end = it == r.by_start.end() ? hi : std::min(hi, it->first);
      it = r.by_start.emplace_hint(it, at, std::make_pair(gap_end, Advice{}));
    }
    change(it->second.second);
    at = it->second.first;
    ++it;
  }
  // Neighbours with equal records become one run; default records go.
  for (auto i = r.by_start.lower_bound(lo); i != r.by_start.end() && i->first < hi;) {
    if (i->second.second == Advice{}) {
      i = r.by_start.erase(i);
      continue;
    }
    auto next = std::next(i);
    if (next != r.by_start.end() && next->first == i->second.first &&
        next->second.second == i->second.second) {
      i->second.first = next->second.first;
      r.by_start.erase(next);
      continue;
    }
    ++i;
  }
}

// Calls `see` with the record of every run of pages in [p, p + n) (the default record for
// pages in no run).
template <typename See>
void each(uint64_t p, uint64_t n, See&& see) {
  uint64_t lo = 0, hi = 0;
  const auto lock = lock_pages(p, n, false, &lo, &hi);
  Runs& r = runs();
  auto it = r.by_start.upper_bound(lo);
  if (it != r.by_start.begin() && std::prev(it)->second.first > lo) --it;  // the run holding lo
  uint64_t at = lo;
  while (at < hi) {
    if (it == r.by_start.end() || it->first >= hi) {
      see(Advice{});  // no run up to hi
      return;
    }
    if (it->first > at) {
      see(Advice{});  // a gap before the next run
      at = it->first;
      continue;
    }
    see(it->second.second);
    at = it->second.first;
    ++it;
  }
}

bool valid_device(int id) {
  int count = 0;
  return id >= 0 && id < kMaxDeviceBits && cuDeviceGetCount(&count) == CUDA_SUCCESS && id < count;
}

}  // namespace

bool valid_location(const CUmemLocation& l) {
  switch (l.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return valid_device(l.id);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return true;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      return l.id >= 0;
    default:
      return false;
  }
}

namespace {
// A location as the queries answer it: the host's id means nothing; the current thread's NUMA
// node is node 0 here (the server's memory has no NUMA placement).
CUmemLocation as_recorded(CUmemLocation l) {
  if (l.type == CU_MEM_LOCATION_TYPE_HOST) l.id = 0;
  if (l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) l = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  return l;
}
}  // namespace

void advise(uint64_t p, uint64_t n, CUmem_advise advice, CUmemLocation where) {
  where = as_recorded(where);
  // The host, however named, is one place for ACCESSED_BY (CU_DEVICE_CPU).
  const bool host = where.type != CU_MEM_LOCATION_TYPE_DEVICE;
  apply(p, n, [&](Advice& a) {
    switch (advice) {
      case CU_MEM_ADVISE_SET_READ_MOSTLY:
        a.read_mostly = true;
        break;
      case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
        a.read_mostly = false;
        break;
      case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        a.preferred = where;
        break;
      case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        a.preferred = CUmemLocation{CU_MEM_LOCATION_TYPE_INVALID, 0};
        break;
      case CU_MEM_ADVISE_SET_ACCESSED_BY:
        a.accessed_by |= host ? kHostBit : uint64_t{1} << where.id;
        break;
      case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        a.accessed_by &= ~(host ? kHostBit : uint64_t{1} << where.id);
        break;
      default:
        break;
    }
  });
}

void prefetched(uint64_t p, uint64_t n, CUmemLocation where) {
  where = as_recorded(where);
  apply(p, n, [&](Advice& a) { a.prefetched = where; });
}

void forget_advice(uint64_t base, uint64_t n) {
  uint64_t lo = 0, hi = 0;
  const auto lock = lock_pages(base, n, true, &lo, &hi);
  Runs& r = runs();
  r.by_start.erase(r.by_start.lower_bound(lo), r.by_start.lower_bound(hi));
}

void forget_all_advice() {
  Runs& r = runs();
  std::lock_guard lock(r.mu);
  r.by_start.clear();
}

// One attribute of [p, p + n), already checked as managed memory.
CUresult range_attribute(void* data, size_t size, CUmem_range_attribute attribute, uint64_t p,
                         uint64_t n) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  // A location all pages share, else none.
  auto common = [&](CUmemLocation Advice::*field) {
    bool first = true;
    CUmemLocation l{CU_MEM_LOCATION_TYPE_INVALID, 0};
    each(p, n, [&](const Advice& a) {
      if (first) {
        l = a.*field;
        first = false;
      } else if (!Advice::same(l, a.*field)) {
        l = CUmemLocation{CU_MEM_LOCATION_TYPE_INVALID, 0};
      }
    });
    return l;
  };
  // As a device ordinal: the device, CU_DEVICE_CPU for the host, else CU_DEVICE_INVALID.
  auto ordinal = [](const CUmemLocation& l) -> int {
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE) return l.id;
    if (l.type == CU_MEM_LOCATION_TYPE_INVALID) return CU_DEVICE_INVALID;
    return CU_DEVICE_CPU;
  };
  // The answer, which must fill the caller's `size` bytes exactly.
  auto put = [&](auto v) {
    if (size != sizeof v) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  };
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: {
      bool all = true;
      each(p, n, [&](const Advice& a) { all = all && a.read_mostly; });
      return put(all ? 1 : 0);
    }
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
      return put(ordinal(common(&Advice::preferred)));
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
      return put(common(&Advice::preferred).type);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
      return put(common(&Advice::preferred).id);
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
      return put(ordinal(common(&Advice::prefetched)));
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      return put(common(&Advice::prefetched).type);
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      return put(common(&Advice::prefetched).id);
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      if (size == 0 || size % sizeof(int) != 0) return CUDA_ERROR_INVALID_VALUE;
      uint64_t all = ~uint64_t{0};
      each(p, n, [&](const Advice& a) { all &= a.accessed_by; });
      const size_t slots = size / sizeof(int);
      size_t k = 0;
      int* out = static_cast<int*>(data);
      for (int d = 0; d < kMaxDeviceBits && k < slots; ++d) {
        if (all & (uint64_t{1} << d)) out[k++] = d;
      }
      if ((all & kHostBit) && k < slots) out[k++] = CU_DEVICE_CPU;
      for (; k < slots; ++k) out[k] = CU_DEVICE_INVALID;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace cuwire::client::managed
