#include "server/tenancy/tenants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "server/worker/ledger.h"

namespace cuwire::server {

std::array<uint8_t, 32> token_digest(const std::string& token) {
  std::array<uint8_t, 32> out{};
  unsigned int n = 0;
  EVP_Digest(token.data(), token.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

uint64_t Tenant::memory_cap(uint64_t device_total) const { return cap_of(caps(), device_total); }

uint64_t Tenant::cap_of(const Caps& c, uint64_t device_total) {
  uint64_t cap = device_total;
  if (c.memory_bytes) cap = std::min(cap, c.memory_bytes);
  if (c.memory_fraction > 0) {
    cap = std::min(cap, static_cast<uint64_t>(
                            std::floor(c.memory_fraction * static_cast<double>(device_total))));
  }
  return cap;
}

uint64_t Tenant::memory_used(int device) const {
  if (ledger_) return ledger_->used(device);
  std::lock_guard lock(mu_);
  auto it = used_.find(device);
  return it == used_.end() ? 0 : it->second;
}

namespace {
thread_local bool t_cap_refused = false;
}  // namespace

bool Tenant::take_cap_refused() { return std::exchange(t_cap_refused, false); }

CUresult Tenant::charge(int device, uint64_t device_total, uint64_t n) {
  const Caps caps = this->caps();  // one snapshot: a reload may change them meanwhile
  const bool capped = caps.memory_bytes || caps.memory_fraction > 0;
  const uint64_t cap = capped ? cap_of(caps, device_total) : UINT64_MAX;
  std::lock_guard lock(mu_);
  uint64_t used = 0;
  if (ledger_) {
    if (slot_ != kReadOnly && ledger_->charge(slot_, device, cap, n, &used)) return CUDA_SUCCESS;
  } else {
    uint64_t& held = used_[device];
    used = held;
    // No device holds more than UINT64_MAX bytes: refused uncapped too.
    if (n <= cap && held <= cap - n) {
      held += n;
      return CUDA_SUCCESS;
    }
  }
  uint64_t suppressed = 0;
  if (capped) t_cap_refused = true;
  if (capped && refusals_.allow(&suppressed)) {
    spdlog::warn(
        "tenant {}: an allocation of {} bytes on GPU {} refused: {} of its {} bytes "
        "cap in use{}",
        spec_.name, n, device, used, cap,
        suppressed ? fmt::format(" ({} more refusals not logged)", suppressed) : "");
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void Tenant::uncharge(int device, uint64_t n) {
  if (ledger_) {
    if (slot_ != kReadOnly) ledger_->uncharge(slot_, device, n);
    return;
  }
  std::lock_guard lock(mu_);
  auto it = used_.find(device);
  if (it == used_.end()) return;
  it->second -= std::min(n, it->second);
}

void Tenant::view(int device, size_t* free, size_t* total) const {
  if (!memory_capped()) return;
  const uint64_t cap = memory_cap(*total);
  const uint64_t used = memory_used(device);
  *total = static_cast<size_t>(cap);
  *free = static_cast<size_t>(std::min<uint64_t>(*free, cap > used ? cap - used : 0));
}

bool Tenant::add_session() {
  int n = sessions_.load(std::memory_order_relaxed);
  do {
    if (spec_.max_sessions > 0 && n >= spec_.max_sessions) return false;
  } while (!sessions_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  return true;
}

std::string Tenant::max_sessions_reached() const {
  return "tenant " + spec_.name + " already has its " + std::to_string(spec_.max_sessions) +
         " sessions (max_sessions)";
}

void Tenant::remove_session() { sessions_.fetch_sub(1, std::memory_order_relaxed); }

TenantRegistry::TenantRegistry(std::vector<TenantSpec> specs, bool open)
    : open_(specs.empty() && open) {
  if (open_) {
    TenantSpec open;
    open.name = "default";
    tenants_.push_back(std::make_shared<Tenant>(std::move(open)));
    return;
  }
  for (auto& s : specs) tenants_.push_back(std::make_shared<Tenant>(std::move(s)));
}

TenantRef TenantRegistry::find(const std::string& token) {
  std::lock_guard lock(mu_);
  if (open_) return tenants_.front();
  const auto digest = token_digest(token);
  TenantRef found;
  // Every tenant is compared, whatever matched: the time taken says nothing about which.
  for (auto& t : tenants_) {
    if (CRYPTO_memcmp(digest.data(), t->spec().token_sha256.data(), digest.size()) == 0 &&
        t->spec().has_token) {
      found = t;
    }
  }
  return found;
}

TenantRef TenantRegistry::find_uid(uint32_t uid) {
  std::lock_guard lock(mu_);
  if (open_) return nullptr;
  for (auto& t : tenants_) {
    const auto& uids = t->spec().uids;
    if (std::find(uids.begin(), uids.end(), uid) != uids.end()) return t;
  }
  return nullptr;
}

std::vector<TenantRef> TenantRegistry::tenants() const {
  std::lock_guard lock(mu_);
  return tenants_;
}

std::vector<TenantRef> TenantRegistry::all() const {
  std::lock_guard lock(mu_);
  std::vector<TenantRef> out = tenants_;
  out.insert(out.end(), removed_.begin(), removed_.end());
  return out;
}

TenantRef TenantRegistry::named(const std::string& name) const {
  std::lock_guard lock(mu_);
  for (const auto& t : tenants_) {
    if (t->name() == name) return t;
  }
  return nullptr;
}

Tenant* TenantRegistry::add(TenantRef t) {
  std::lock_guard lock(mu_);
  tenants_.push_back(std::move(t));
  return tenants_.back().get();
}

void TenantRegistry::remove(Tenant* t) {
  std::lock_guard lock(mu_);
  auto it =
      std::find_if(tenants_.begin(), tenants_.end(), [&](const auto& p) { return p.get() == t; });
  if (it == tenants_.end()) return;
  t->mark_removed();
  removed_.push_back(std::move(*it));
  tenants_.erase(it);
}

std::vector<TenantRef> TenantRegistry::retire(const std::function<bool(const Tenant&)>& done) {
  // `done` may wait (a GPU's schedule shared with workers): asked without the lock, which
  // every Hello takes.
  std::vector<TenantRef> removed;
  {
    std::lock_guard lock(mu_);
    removed = removed_;
  }
  std::vector<TenantRef> out;
  for (TenantRef& t : removed) {
    if (done(*t)) out.push_back(std::move(t));
  }
  std::lock_guard lock(mu_);
  std::erase_if(removed_, [&](const TenantRef& t) {
    return std::find(out.begin(), out.end(), t) != out.end();
  });
  return out;
}

size_t TenantRegistry::removed_count() const {
  std::lock_guard lock(mu_);
  return removed_.size();
}

}  // namespace cuwire::server
