// The bulk bytes of the call a session thread is executing. Driver functions take module
// images by pointer alone; a backend that parses images itself (sim) bounds them with this,
// so a hostile image can never make it read past what the client sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace cuwire::server {

// Sets the current call's bulk bytes for this thread for the scope's lifetime.
class BulkScope {
 public:
  explicit BulkScope(std::span<const uint8_t> bulk);
  ~BulkScope();
  BulkScope(const BulkScope&) = delete;
  BulkScope& operator=(const BulkScope&) = delete;

 private:
  std::span<const uint8_t> saved_;
};

// If p points inside the current call's bulk bytes, sets *len to the bytes from p to their end.
bool bulk_extent(const void* p, size_t* len);

}  // namespace cuwire::server
