// InlineVector: a vector of trivially copyable elements whose first N live inside the object, so
// that the common small case (a call's arguments, its one or two bulk pieces) costs no heap
// allocation. Past N it moves to the heap, growing geometrically, like std::vector.
//
// Neither copyable nor movable: its users are stack objects of one call.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>

namespace cuwire {

template <typename T, size_t N>
class InlineVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  InlineVector() = default;
  InlineVector(const InlineVector&) = delete;
  InlineVector& operator=(const InlineVector&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  T* begin() { return p_; }
  T* end() { return p_ + size_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + size_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T& back() { return p_[size_ - 1]; }
  std::span<const T> span() const { return {p_, size_}; }

  void push_back(const T& v) {
    if (size_ == capacity_) grow(size_ + 1);
    p_[size_++] = v;
  }
  // Appends n elements from src.
  void append(const T* src, size_t n) {
    if (n == 0) return;
    if (n > capacity_ - size_) grow(size_ + n);
    std::memcpy(p_ + size_, src, n * sizeof(T));
    size_ += n;
  }
  // Makes it n elements long, all zero bytes.
  void resize_zeroed(size_t n) {
    if (n > capacity_) grow(n);
    std::memset(p_, 0, n * sizeof(T));
    size_ = n;
  }
  void clear() { size_ = 0; }

 private:
  void grow(size_t need) {
    size_t cap = capacity_ * 2;
    if (cap < need) cap = need;
    auto bigger = std::make_unique_for_overwrite<T[]>(cap);
    std::memcpy(bigger.get(), p_, size_ * sizeof(T));
    heap_ = std::move(bigger);
    p_ = heap_.get();
    capacity_ = cap;
  }

  T inline_[N];
  std::unique_ptr<T[]> heap_;
  T* p_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace cuwire
