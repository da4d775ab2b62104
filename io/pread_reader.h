// PreadReader: the portable Reader, built on pread(2).
//
// Requests are served by a small pool of worker threads so that several reads are in flight at
// once even without io_uring (NVMe needs queue depth to reach its bandwidth). With zero workers
// it reads synchronously inside submit(), which is what the GGUF parser and tests want.
//
// Buffered reads go through the page cache; `drop_cache_after_read` asks the kernel to forget
// the pages after each read (posix_fadvise DONTNEED) so that a streaming run does not fill the
// page cache behind the budget's back.
//
// A path naming one part of a split model opens every part (io/split_set.h): one descriptor per
// part, reads mapped from the set's address space to (part, offset), a read that crosses a part's
// end split into one pread per part. `whole_split_set = false` opens only the named file.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/reader.h"
#include "io/split_set.h"

namespace sluice::io {

struct PreadOptions {
  unsigned workers = 0;  // 0: synchronous
  bool drop_cache_after_read = false;
  bool whole_split_set = true;
};

class PreadReader final : public Reader {
 public:
  // Throws Error(io_error) naming the path when the file cannot be opened.
  explicit PreadReader(const std::string& path, PreadOptions options = {});
  ~PreadReader() override;
  PreadReader(const PreadReader&) = delete;
  PreadReader& operator=(const PreadReader&) = delete;

  std::string_view backend() const override { return "pread"; }
  const std::string& path() const override { return path_; }
  uint64_t file_size() const override { return file_size_; }
  std::vector<FilePart> parts() const override { return map_.parts(); }

  void submit(std::span<const ReadRequest> requests) override;
  size_t reap(std::span<Completion> out, size_t min_complete) override;
  size_t in_flight() const override;
  void read_sync(uint64_t offset, std::span<std::byte> dst) override;

 private:
  // Reads the whole extent, retrying EINTR/EAGAIN and continuing after short reads.
  int64_t read_fully(const ReadRequest& request) const;
  void worker_loop();
  void close_all();

  std::string path_;
  std::vector<int> fds_;  // one per part
  PartMap map_;
  uint64_t file_size_ = 0;
  PreadOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable done_ready_;
  std::deque<ReadRequest> pending_;
  std::deque<Completion> done_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace sluice::io
