// SPDX-License-Identifier: Apache-2.0
// A T (or n of them) in anonymous shared memory: what forked children write their results into.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>

namespace test {

/// Anonymous shared memory that forked children can write results into.
template <class T> class shared_block {
public:
  explicit shared_block(std::size_t n = 1) : n_(n) {
    void* p =
        ::mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = static_cast<T*>(p);
    for (std::size_t i = 0; i < n; ++i) new (p_ + i) T{};
  }
  ~shared_block() { ::munmap(p_, sizeof(T) * n_); }
  shared_block(const shared_block&) = delete;
  shared_block& operator=(const shared_block&) = delete;
  T& operator[](std::size_t i) { return p_[i]; }
  T* get() { return p_; }

private:
  T* p_;
  std::size_t n_;
};

} // namespace test
