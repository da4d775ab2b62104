#include "app/text_stream.h"

#include <algorithm>

namespace sluice::core {

size_t utf8_whole(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back >= len ? n : n - back;
  }
  return n;
}

void TextStream::reset(const std::vector<std::string>& stops) {
  stops_ = stops;
  buf_.clear();
  sent_.clear();
  stopped_ = false;
}

void TextStream::reserve(size_t bytes) {
  buf_.reserve(bytes);
  sent_.reserve(bytes);
}

std::string TextStream::push(const std::string& piece) {
  if (stopped_) return {};
  buf_ += piece;
  for (const auto& s : stops_) {
    const size_t at = buf_.find(s);
    if (at != std::string::npos) {
      buf_.resize(at);
      stopped_ = true;
    }
  }
  size_t keep = 0;  // a tail that may grow into a stop string stays back
  if (!stopped_) {
    for (const auto& s : stops_)
      for (size_t k = std::min(s.size() - 1, buf_.size()); k > keep; --k)
        if (buf_.compare(buf_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
  }
  size_t n = utf8_whole(buf_.substr(0, buf_.size() - keep));
  if (stopped_) n = buf_.size();
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  sent_ += out;
  return out;
}

std::string TextStream::flush() {
  std::string out = stopped_ ? std::string() : buf_;
  buf_.clear();
  sent_ += out;
  return out;
}

}  // namespace sluice::core
