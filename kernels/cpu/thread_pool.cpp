// ThreadPool: persistent workers that claim chunks of the current task from one atomic ticket.
//
// The ticket packs (generation:32 | n_chunks:16 | next_chunk:16). A call publishes the task
// (function pointer, context, chunking), stores a fresh ticket and wakes the workers; everyone,
// the caller included, claims chunks by CAS on the ticket, and the caller returns once `done`
// reaches n_chunks. The caller never waits for a worker to check in, so a worker the OS has not
// scheduled costs nothing: on an oversubscribed machine the caller simply runs more chunks.
// A worker that wakes late and finds a newer task just helps with that one: task fields are read
// only after a successful claim, and the caller cannot publish the next task before every
// claimed chunk is done. Workers spin briefly before sleeping on a condition variable so
// back-to-back matvecs do not each pay a wake-up. (Not std::atomic::wait: GCC 12's libstdc++
// loses wake-ups under this pattern.) Nothing is allocated after construction.
#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_CPU_RELAX() _mm_pause()
#else
#define SLUICE_CPU_RELAX() ((void)0)
#endif

namespace sluice::kernels {
namespace {

constexpr int kSpinIterations = 4000;
constexpr int64_t kMaxChunks = 0xffff;

inline uint64_t make_ticket(uint64_t generation, uint64_t n_chunks) {
  return (generation << 32) | (n_chunks << 16);
}
inline int64_t ticket_next(uint64_t t) { return int64_t(t & 0xffff); }
inline int64_t ticket_chunks(uint64_t t) { return int64_t((t >> 16) & 0xffff); }

}  // namespace

struct ThreadPool::State {
  std::vector<std::thread> workers;
  std::atomic<uint64_t> ticket{0};
  std::atomic<uint32_t> generation{0};  // bumped per task; workers sleep on it
  std::atomic<int64_t> done{0};         // chunks of the current task finished
  std::atomic<bool> stopping{false};
  std::mutex sleep_mutex;
  std::condition_variable task_ready;  // workers sleep here between tasks
  std::condition_variable task_done;   // the caller sleeps here until done == n_chunks
  // The current task, written before the ticket is published (release) and read only after a
  // chunk is claimed (acquire).
  ChunkFn fn = nullptr;
  void* ctx = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;

  // Claims and runs chunks until the current ticket is exhausted.
  void run_chunks() {
    uint64_t t = ticket.load(std::memory_order_acquire);
    for (;;) {
      const int64_t c = ticket_next(t);
      const int64_t n_chunks = ticket_chunks(t);
      if (c >= n_chunks) return;
      if (!ticket.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      const int64_t begin = c * chunk;
      fn(ctx, begin, std::min(n, begin + chunk));
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n_chunks) {
        { std::lock_guard<std::mutex> lock(sleep_mutex); }  // pairs with the caller's check-then-wait
        task_done.notify_one();
      }
      t = ticket.load(std::memory_order_acquire);
    }
  }

  void wake_workers(uint32_t g) {
    generation.store(g, std::memory_order_release);
    { std::lock_guard<std::mutex> lock(sleep_mutex); }  // a worker between check and wait sees g
    task_ready.notify_all();
  }

  void worker_loop() {
    // Start from 0, not the current value: a worker that starts after tasks (or the destructor's
    // stop signal) were published must still see them.
    uint32_t seen = 0;
    for (;;) {
      uint32_t g = generation.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
        SLUICE_CPU_RELAX();
        g = generation.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(sleep_mutex);
        task_ready.wait(lock, [&] { return generation.load(std::memory_order_acquire) != seen; });
        g = generation.load(std::memory_order_acquire);
      }
      seen = g;
      if (stopping.load(std::memory_order_acquire)) return;
      run_chunks();
    }
  }
};

ThreadPool::ThreadPool(unsigned n_threads) : n_threads_(n_threads), state_(nullptr) {
  if (n_threads == 0) throw Error(ErrorCode::invalid_argument, "thread count must be at least 1 (got 0)");
  if (n_threads > 4096)
    throw Error(ErrorCode::invalid_argument, "thread count " + std::to_string(n_threads) + " exceeds 4096");
  state_ = new State();
  state_->workers.reserve(n_threads - 1);
  for (unsigned i = 1; i < n_threads; ++i) state_->workers.emplace_back([s = state_] { s->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  state_->stopping.store(true, std::memory_order_release);
  state_->wake_workers(state_->generation.load(std::memory_order_relaxed) + 1);
  for (auto& t : state_->workers) t.join();
  delete state_;
}

void ThreadPool::run(int64_t n, int64_t grain, ChunkFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n_threads_ == 1 || n <= grain) {
    fn(ctx, 0, n);
    return;
  }
  State& s = *state_;
  // A few chunks per thread lets fast threads pick up slack; never below the grain.
  const int64_t target_chunks = std::min<int64_t>(int64_t(n_threads_) * 4, kMaxChunks);
  s.chunk = std::max(grain, (n + target_chunks - 1) / target_chunks);
  const int64_t n_chunks = (n + s.chunk - 1) / s.chunk;
  s.fn = fn;
  s.ctx = ctx;
  s.n = n;
  s.done.store(0, std::memory_order_relaxed);
  const uint32_t g = s.generation.load(std::memory_order_relaxed) + 1;
  s.ticket.store(make_ticket(g, uint64_t(n_chunks)), std::memory_order_release);
  s.wake_workers(g);
  s.run_chunks();
  int64_t d = s.done.load(std::memory_order_acquire);
  for (int spin = 0; d != n_chunks && spin < kSpinIterations; ++spin) {
    SLUICE_CPU_RELAX();
    d = s.done.load(std::memory_order_acquire);
  }
  if (d != n_chunks) {
    std::unique_lock<std::mutex> lock(s.sleep_mutex);
    s.task_done.wait(lock, [&] { return s.done.load(std::memory_order_acquire) == n_chunks; });
  }
}

}  // namespace sluice::kernels
