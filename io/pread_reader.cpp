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
  const std::vector<std::string> paths = options_.whole_split_set ? split_set_paths(path) : std::vector{path};
  std::vector<uint64_t> sizes;
  for (const std::string& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int saved = errno;
      close_all();
      throw Error(ErrorCode::io_error, "cannot open '" + p + "': " + std::strerror(saved));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      int saved = errno;
      ::close(fd);
      close_all();
      throw Error(ErrorCode::io_error, "'" + p + "' is not a regular file" +
                                           (saved ? std::string(": ") + std::strerror(saved) : ""));
    }
    fds_.push_back(fd);
    sizes.push_back(static_cast<uint64_t>(st.st_size));
  }
  map_ = PartMap(paths, sizes);
  file_size_ = map_.end();
  for (unsigned i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

PreadReader::~PreadReader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
  close_all();
}

void PreadReader::close_all() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

int64_t PreadReader::read_fully(const ReadRequest& request) const {
  if (request.length == 0) return 0;
  if (request.offset > file_size_ || request.length > file_size_ - request.offset) return -ENODATA;
  uint64_t done = 0;
  while (done < request.length) {
    // One part at a time; a request that crosses a part's end continues in the next part.
    const PartMap::Run run = map_.run_at(request.offset + done, request.length - done);
    if (run.part < 0) {  // padding between parts
      std::memset(request.dst + done, 0, run.length);
      done += run.length;
      continue;
    }
    const int fd = fds_[static_cast<size_t>(run.part)];
    uint64_t got = 0;
    while (got < run.length) {
      ssize_t n = ::pread(fd, request.dst + done + got, run.length - got, static_cast<off_t>(run.local + got));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return -errno;
      }
      if (n == 0) return -ENODATA;
      got += static_cast<uint64_t>(n);
    }
    if (options_.drop_cache_after_read) {
      ::posix_fadvise(fd, static_cast<off_t>(run.local), static_cast<off_t>(run.length), POSIX_FADV_DONTNEED);
    }
    done += run.length;
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
    throw Error(ErrorCode::io_error, map_.describe_read_failure(path_, offset, dst.size(), result));
  }
}

}  // namespace sluice::io
