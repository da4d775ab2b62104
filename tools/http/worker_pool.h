// A fixed pool of worker threads for sluice serve's front. The event loop reserves a worker when
// a request is complete (its body read), and runs the request on it at once; a reservation that
// cannot be had is answered 503. A reserved worker always exists for the job that follows, so the
// job queue never grows past the pool.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::tools::http {

class WorkerPool {
 public:
  explicit WorkerPool(size_t n);
  ~WorkerPool();  // finishes the queued jobs, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  size_t size() const { return threads_.size(); }
  // Event loop thread only: reserve, then run() the job.
  bool try_reserve();
  // Uses a reservation: runs `job` on a worker, ends the reservation, then runs `then` (which may
  // hand the connection back, so a pipelined request finds the worker free again).
  void run(std::function<void()> job, std::function<void()> then);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::function<void()>>> jobs_;
  size_t reserved_ = 0;  // reservations plus jobs queued or running
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::tools::http
