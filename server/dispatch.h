// What generated dispatch code (server_dispatch.cc) needs from the server: a reader over a
// call's arguments, a writer for its reply, and the calling session's tables.
//
// Thread-safety: all three belong to one session and are used by its one thread.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "args.h"
#include "driver_api.h"
#include "handle_kind.h"
#include "value_sizes.h"

namespace cuwire::server {

class ArgReader {
 public:
  ArgReader(std::span<const uint8_t> args, std::span<const uint8_t> bulk)
      : cursor_(args), bulk_(bulk) {}

  template <typename T>
  bool get(T* v) { return cursor_.get(v); }
  bool get_string(const char** out);
  // An in-array inside the message: its byte length must be a multiple of elem_size.
  bool get_array(std::span<const uint8_t>* out, size_t elem_size);
  // A void* in-array from the frame's bulk bytes: u64 length in args, bytes in bulk, in order.
  bool get_bulk(std::span<const uint8_t>* out);
  // An in-array of handle ids, translated to backend handles.
  template <typename H>
  CUresult get_handles(class CallContext& cx, HandleKind kind, std::vector<H>* out);

  bool at_end() const { return cursor_.at_end() && bulk_pos_ == bulk_.size(); }
  // What a call with undecodable arguments returns; the session logs it.
  CUresult malformed() {
    malformed_ = true;
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool was_malformed() const { return malformed_; }

 private:
  ArgCursor cursor_;
  std::span<const uint8_t> bulk_;
  size_t bulk_pos_ = 0;
  std::deque<std::string> strings_;  // stable storage for get_string
  bool malformed_ = false;
};

class ReplyWriter {
 public:
  explicit ReplyWriter(uint64_t max_bulk) : max_bulk_(max_bulk) {}

  template <typename T>
  void put(const T& v) { outs_.put(v); }
  void put_bytes(const void* p, size_t n) { outs_.append(p, n); }
  // Room for a void* out-array, sent as the reply's bulk bytes.
  bool reserve_bulk_ok(size_t n) const { return bulk_.size() + n <= max_bulk_; }
  uint8_t* add_bulk(size_t n);

  std::span<const uint8_t> outs() const { return outs_.data(); }
  std::span<const uint8_t> bulk() const { return bulk_; }
  void clear() {
    outs_.clear();
    bulk_.clear();
  }

 private:
  ArgBuffer outs_;
  std::vector<uint8_t> bulk_;
  uint64_t max_bulk_;
};

// The calling session's view: its backend, its handles and its allocations. Every handle and
// device pointer a client sends is checked here before the backend sees it.
class CallContext {
 public:
  explicit CallContext(DriverApi& api) : api_(api) {}
  ~CallContext();
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  DriverApi& api() { return api_; }

  // Client id -> backend handle. Null and the special stream values pass through; an id this
  // session was not given is CUDA_ERROR_INVALID_HANDLE (INVALID_CONTEXT for contexts).
  template <typename H>
  CUresult lookup(HandleKind kind, uint64_t id, H* out) {
    void* p = nullptr;
    CUresult e = lookup_raw(kind, id, &p);
    *out = reinterpret_cast<H>(p);
    return e;
  }
  CUresult lookup_raw(HandleKind kind, uint64_t id, void** out) const;
  // A client-minted id must be in the client range and unused.
  CUresult check_mint(uint64_t id) const;
  template <typename H>
  CUresult bind(HandleKind kind, uint64_t id, H handle) {
    return bind_raw(kind, id, reinterpret_cast<void*>(handle));
  }
  CUresult bind_raw(HandleKind kind, uint64_t id, void* handle);
  // Backend handle -> id, assigning a server id the first time a handle is seen. A handle
  // derived from another (a function from its module) names that `parent` id: releasing the
  // parent releases it too, so a backend that reuses the memory of an unloaded module's
  // functions can never make an old id name a new function.
  template <typename H>
  uint64_t export_handle(HandleKind kind, H handle, uint64_t parent = 0) {
    return export_raw(kind, reinterpret_cast<void*>(handle), parent);
  }
  uint64_t export_raw(HandleKind kind, void* handle, uint64_t parent = 0);
  // Forgets `id` and every handle derived from it.
  void release(uint64_t id);
  size_t handle_count() const { return handles_.size(); }

  // Device memory this session allocated.
  CUresult check_range(CUdeviceptr p, size_t n) const;
  CUresult check_free(CUdeviceptr p) const;
  void on_alloc(CUdeviceptr p, size_t n);
  // Device memory the session may copy to and from but never frees: module globals and
  // constants. They belong to the module or library handle `owner` and go when it is released.
  void on_global(CUdeviceptr p, size_t n, uint64_t owner);
  void on_free(CUdeviceptr p);
  size_t allocated_bytes() const { return allocated_bytes_; }
  size_t allocation_count() const { return allocations_.size(); }

  // Error of a fire-and-forget call, kept for the next synchronising call. The first one wins.
  void defer_error(CUresult e) {
    if (deferred_ == CUDA_SUCCESS) deferred_ = e;
  }
  CUresult take_deferred_error() {
    CUresult e = deferred_;
    deferred_ = CUDA_SUCCESS;
    return e;
  }

  // Texture and surface objects this session created. Their values are the backend's own:
  // kernels receive them as parameters, which the server passes through untouched, so they
  // cannot be renamed like handles. A value the session did not create is refused.
  void on_object(bool surface, uint64_t value) { objects_.insert({surface, value}); }
  bool owns_object(bool surface, uint64_t value) const { return objects_.count({surface, value}); }
  void forget_object(bool surface, uint64_t value) { objects_.erase({surface, value}); }

  // Frees everything the session still holds, newest handles first; called at disconnect.
  void reclaim();

 private:
  struct HandleEntry {
    HandleKind kind;
    void* handle;
    uint64_t parent = 0;
  };
  DriverApi& api_;
  std::unordered_map<uint64_t, HandleEntry> handles_;
  std::map<std::pair<HandleKind, void*>, uint64_t> by_handle_;
  uint64_t next_server_id_ = kServerIdBase;
  std::map<CUdeviceptr, size_t> allocations_;
  struct GlobalRange {
    size_t size;
    uint64_t owner;
  };
  std::map<CUdeviceptr, GlobalRange> globals_;
  size_t allocated_bytes_ = 0;
  std::set<std::pair<bool, uint64_t>> objects_;
  CUresult deferred_ = CUDA_SUCCESS;
};

template <typename H>
CUresult ArgReader::get_handles(CallContext& cx, HandleKind kind, std::vector<H>* out) {
  std::span<const uint8_t> raw;
  if (!get_array(&raw, sizeof(uint64_t))) return malformed();
  out->resize(raw.size() / sizeof(uint64_t));
  for (size_t i = 0; i < out->size(); ++i) {
    uint64_t id;
    std::memcpy(&id, raw.data() + i * sizeof(uint64_t), sizeof id);
    if (CUresult e = cx.lookup(kind, id, &(*out)[i])) return e;
  }
  return CUDA_SUCCESS;
}

// Runs call `id` (generated). *known is false for an id the manifest does not have.
CUresult dispatch_call(uint32_t id, CallContext& cx, ArgReader& in, ReplyWriter& out, bool* known);

}  // namespace cuwire::server
