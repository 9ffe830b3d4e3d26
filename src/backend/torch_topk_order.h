// torch_topk_select: which k of n scores torch.topk keeps on the CPU, exact ties included, as code
// that runs on the host and in a CUDA kernel (one thread). ATen's TopKImpl puts (score, index) pairs
// in index order and, with a comparator on the score alone (NaN largest), runs std::partial_sort of
// the first k when 64 k <= n, else std::nth_element at k - 1; among exactly equal scores the kept set
// then depends on those algorithms' steps, which this file repeats as libstdc++ has them
// (bits/stl_algo.h __introselect, __unguarded_partition_pivot, __insertion_sort; bits/stl_heap.h
// __make_heap, __adjust_heap, __push_heap, __pop_heap, __sort_heap), moving indices instead of pairs.
// The CPU backend's indexer_topk calls the std algorithms themselves; tests/backend checks this file
// against them on tie-heavy inputs.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FT_TOPK_HD __host__ __device__
#else
#define FT_TOPK_HD
#endif

namespace ft::topk_order {

/** The comparator of ATen's topk (largest): NaN above everything, else the larger score first. */
struct Better {
  const float* s;
  FT_TOPK_HD bool operator()(int32_t x, int32_t y) const {
    const float a = s[x], b = s[y];
    return (a != a && b == b) || a > b;  // a != a: NaN
  }
};

FT_TOPK_HD inline void swap_at(int32_t* a, int64_t i, int64_t j) {
  const int32_t t = a[i];
  a[i] = a[j];
  a[j] = t;
}

FT_TOPK_HD inline void push_heap(int32_t* a, int64_t hole, int64_t top, int32_t value, const Better& c) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && c(a[parent], value)) {
    a[hole] = a[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  a[hole] = value;
}

FT_TOPK_HD inline void adjust_heap(int32_t* a, int64_t hole, int64_t len, int32_t value, const Better& c) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (c(a[child], a[child - 1])) child--;
    a[hole] = a[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    a[hole] = a[child - 1];
    hole = child - 1;
  }
  push_heap(a, hole, top, value, c);
}

/** libstdc++ __pop_heap(first, first + len, first + result). */
FT_TOPK_HD inline void pop_heap(int32_t* a, int64_t len, int64_t result, const Better& c) {
  const int32_t value = a[result];
  a[result] = a[0];
  adjust_heap(a, 0, len, value, c);
}

FT_TOPK_HD inline void make_heap(int32_t* a, int64_t len, const Better& c) {
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; --parent) {
    adjust_heap(a, parent, len, a[parent], c);
    if (parent == 0) return;
  }
}

/** libstdc++ __heap_select(a, a + middle, a + n). */
FT_TOPK_HD inline void heap_select(int32_t* a, int64_t middle, int64_t n, const Better& c) {
  make_heap(a, middle, c);
  for (int64_t i = middle; i < n; ++i)
    if (c(a[i], a[0])) pop_heap(a, middle, i, c);
}

FT_TOPK_HD inline void sort_heap(int32_t* a, int64_t len, const Better& c) {
  while (len > 1) {
    --len;
    pop_heap(a, len, len, c);
  }
}

FT_TOPK_HD inline void insertion_sort(int32_t* a, int64_t first, int64_t last, const Better& c) {
  if (first == last) return;
  for (int64_t i = first + 1; i != last; ++i) {
    const int32_t val = a[i];
    if (c(val, a[first])) {
      for (int64_t j = i; j > first; --j) a[j] = a[j - 1];
      a[first] = val;
    } else {
      int64_t hole = i;
      while (c(val, a[hole - 1])) {
        a[hole] = a[hole - 1];
        --hole;
      }
      a[hole] = val;
    }
  }
}

FT_TOPK_HD inline void move_median_to_first(int32_t* a, int64_t result, int64_t x, int64_t y, int64_t z,
                                            const Better& c) {
  if (c(a[x], a[y])) {
    if (c(a[y], a[z])) swap_at(a, result, y);
    else if (c(a[x], a[z])) swap_at(a, result, z);
    else swap_at(a, result, x);
  } else if (c(a[x], a[z])) {
    swap_at(a, result, x);
  } else if (c(a[y], a[z])) {
    swap_at(a, result, z);
  } else {
    swap_at(a, result, y);
  }
}

FT_TOPK_HD inline int64_t unguarded_partition(int32_t* a, int64_t first, int64_t last, int64_t pivot, const Better& c) {
  while (true) {
    while (c(a[first], a[pivot])) ++first;
    --last;
    while (c(a[pivot], a[last])) --last;
    if (!(first < last)) return first;
    swap_at(a, first, last);
    ++first;
  }
}

FT_TOPK_HD inline int floor_log2(int64_t n) {
  int r = -1;
  while (n > 0) n >>= 1, ++r;
  return r;
}

/** libstdc++ std::nth_element(a, a + nth, a + n). */
FT_TOPK_HD inline void nth_element(int32_t* a, int64_t nth, int64_t n, const Better& c) {
  if (n == 0 || nth == n) return;
  int64_t first = 0, last = n;
  int depth = floor_log2(n) * 2;
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(a + first, nth + 1 - first, last - first, c);
      swap_at(a, first, nth);
      return;
    }
    --depth;
    const int64_t mid = first + (last - first) / 2;
    move_median_to_first(a, first, first + 1, mid, last - 1, c);
    const int64_t cut = unguarded_partition(a, first + 1, last, first, c);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(a, first, last, c);
}

/** The k of a[0, n) (indices into s, usually 0..n-1 in order) that torch.topk(k) keeps on the CPU
 *  end up in a[0, k): best first when 64 k <= n (partial_sort), else with a[k - 1] the k-th best
 *  and a[0, k - 1) in nth_element's order (ATen then sorts those, which keeps the set). */
FT_TOPK_HD inline void torch_topk_select(int32_t* a, const float* s, int64_t n, int64_t k) {
  const Better c{s};
  if (k <= 0) return;
  if (k * 64 <= n) {
    heap_select(a, k, n, c);
    sort_heap(a, k, c);
  } else {
    nth_element(a, k - 1, n, c);
  }
}

}  // namespace ft::topk_order
