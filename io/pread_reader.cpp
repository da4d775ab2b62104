#include "io/pread_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace sluice::io {

PreadReader::PreadReader(const std::string& path, PreadOptions options)
    : path_(path), options_(options) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw Error(ErrorCode::io_error, "cannot open '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    int saved = errno;
    ::close(fd_);
    throw Error(ErrorCode::io_error, "'" + path + "' is not a regular file" +
                                         (saved ? std::string(": ") + std::strerror(saved) : ""));
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  for (unsigned i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

PreadReader::~PreadReader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
  if (fd_ >= 0) ::close(fd_);
}

int64_t PreadReader::read_fully(const ReadRequest& request) const {
  uint64_t done = 0;
  while (done < request.length) {
    ssize_t n = ::pread(fd_, request.dst + done, request.length - done,
                        static_cast<off_t>(request.offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -errno;
    }
    if (n == 0) return -ENODATA;
    done += static_cast<uint64_t>(n);
  }
  if (options_.drop_cache_after_read && request.length > 0) {
    ::posix_fadvise(fd_, static_cast<off_t>(request.offset), static_cast<off_t>(request.length),
                    POSIX_FADV_DONTNEED);
  }
  return static_cast<int64_t>(request.length);
}

void PreadReader::submit(std::span<const ReadRequest> requests) {
  std::unique_lock lock(mutex_);
  for (const ReadRequest& r : requests) {
    ++in_flight_;
    if (workers_.empty()) {
      lock.unlock();
      int64_t result = read_fully(r);
      lock.lock();
      done_.push_back(Completion{r, result});
    } else {
      pending_.push_back(r);
    }
  }
  lock.unlock();
  if (!workers_.empty()) work_ready_.notify_all();
  done_ready_.notify_all();
}

void PreadReader::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (stopping_) return;
    ReadRequest r = pending_.front();
    pending_.pop_front();
    lock.unlock();
    int64_t result = read_fully(r);
    lock.lock();
    done_.push_back(Completion{r, result});
    done_ready_.notify_all();
  }
}

size_t PreadReader::reap(std::span<Completion> out, size_t min_complete) {
  std::unique_lock lock(mutex_);
  if (min_complete > in_flight_) {
    throw Error(ErrorCode::internal, "reap asked for " + std::to_string(min_complete) +
                                         " completions with only " + std::to_string(in_flight_) +
                                         " reads in flight");
  }
  done_ready_.wait(lock, [&] { return done_.size() >= min_complete; });
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n++] = done_.front();
    done_.pop_front();
    --in_flight_;
  }
  return n;
}

size_t PreadReader::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

void PreadReader::read_sync(uint64_t offset, std::span<std::byte> dst) {
  ReadRequest r{offset, dst.size(), dst.data(), 0};
  int64_t result = read_fully(r);
  if (result < 0) {
    throw Error(ErrorCode::io_error, describe_read_failure(path_, offset, dst.size(), result));
  }
}

}  // namespace sluice::io
