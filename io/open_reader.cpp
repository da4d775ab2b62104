#include "io/open_reader.h"

#include <algorithm>

#include "common/error.h"
#include "io/pread_reader.h"
#include "io/uring_reader.h"

namespace sluice::io {

namespace {

std::unique_ptr<Reader> make_pread(const std::string& path, const IoOptions& options) {
  PreadOptions p;
  p.workers = options.pread_workers ? options.pread_workers : std::min(options.queue_depth, 32u);
  p.drop_cache_after_read = true;
  return std::make_unique<PreadReader>(path, p);
}

}  // namespace

OpenedReader open_reader(const std::string& path, const IoOptions& options) {
  OpenedReader result;
  auto notify = [&](std::string line) {
    if (options.on_notice) options.on_notice(line);
    result.notices.push_back(std::move(line));
  };
  if (options.kind == IoKind::pread) {
    result.reader = make_pread(path, options);
    return result;
  }
  UringOptions u;
  u.queue_depth = options.queue_depth;
  u.direct = options.direct;
  u.staging_bytes = options.staging_bytes;
  u.simulate_setup_failure = options.simulate_uring_failure;
  u.simulate_direct_refused = options.simulate_direct_refused;
  try {
    auto reader = std::make_unique<UringReader>(path, u);
    if (!reader->notice().empty()) notify(reader->notice());
    result.reader = std::move(reader);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::unsupported || options.kind == IoKind::uring) throw;
    result.reader = make_pread(path, options);
    notify(std::string(e.what()) + "; using the pread backend (buffered, pages dropped after each read)");
  }
  return result;
}

IoKind parse_io_kind(std::string_view text, std::string_view what) {
  if (text == "auto") return IoKind::automatic;
  if (text == "uring" || text == "io_uring") return IoKind::uring;
  if (text == "pread") return IoKind::pread;
  throw Error(ErrorCode::invalid_argument,
              std::string(what) + ": expected auto, uring or pread, got '" + std::string(text) + "'");
}

std::string_view to_string(IoKind kind) {
  switch (kind) {
    case IoKind::automatic: return "auto";
    case IoKind::uring: return "uring";
    case IoKind::pread: return "pread";
  }
  return "?";
}

}  // namespace sluice::io
