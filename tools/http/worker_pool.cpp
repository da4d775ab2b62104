#include "tools/http/worker_pool.h"

namespace sluice::tools::http {

WorkerPool::WorkerPool(size_t n) {
  threads_.reserve(n);
  for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool WorkerPool::try_reserve() {
  std::lock_guard lock(mu_);
  if (reserved_ >= threads_.size()) return false;
  ++reserved_;
  return true;
}

void WorkerPool::run(std::function<void()> job, std::function<void()> then) {
  {
    std::lock_guard lock(mu_);
    jobs_.emplace_back(std::move(job), std::move(then));
  }
  cv_.notify_one();
}

void WorkerPool::loop() {
  for (;;) {
    std::pair<std::function<void()>, std::function<void()>> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job.first();
    {
      std::lock_guard lock(mu_);
      --reserved_;
    }
    job.second();
  }
}

}  // namespace sluice::tools::http
