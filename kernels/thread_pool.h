// ThreadPool: a persistent set of worker threads for data-parallel kernels.
//
// Created once (sized by -t) and passed to every kernel that parallelises; kernels never create
// threads. parallel_for splits [0, n) into contiguous chunks, runs them on the workers and the
// calling thread, and returns when all are done. No allocation per call: the task is passed as
// a function pointer plus context.
//
// Contract: one parallel_for at a time per pool (not re-entrant, not called concurrently from
// several threads); chunk functions must not throw. Which thread runs which chunk varies from
// call to call, so kernels make each output element depend only on its index (matvec does: one
// row = one vec_dot), which keeps results identical for any thread count. Idle workers spin
// briefly and then sleep, so a pool costs nothing between tokens. Tested in
// tests/test_kernels_matvec.cpp (coverage of [0, n), thread-count invariance) and clean under
// ThreadSanitizer.
#pragma once

#include <cstdint>
#include <utility>

namespace sluice::kernels {

class ThreadPool {
 public:
  // n_threads >= 1 (1 means run inline, no worker threads); throws Error(invalid_argument) for 0.
  explicit ThreadPool(unsigned n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return n_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); each chunk has at least `grain`
  // items (except possibly the last). Blocks until all chunks are done.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    auto trampoline = [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); };
    run(n, grain, trampoline, &fn);
  }

 private:
  using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
  void run(int64_t n, int64_t grain, ChunkFn fn, void* ctx);

  struct State;
  unsigned n_threads_;
  State* state_;
};

}  // namespace sluice::kernels
