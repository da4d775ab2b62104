#include "tools/http/request_parser.h"

#include <algorithm>
#include <cctype>

namespace sluice::tools::http {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_token_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Comma-separated tokens of a header value contain `token` (case-insensitive).
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (lower(trim(value.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// The path of a request target: origin form ("/p?q") or absolute form ("http://host:1/p?q",
// which RFC 9112 3.2.2 says a server must accept); the query is dropped.
std::string path_of(std::string_view target) {
  const size_t scheme_end = target.find("://");
  if (scheme_end != std::string_view::npos && scheme_end > 0 && target.front() != '/' &&
      (lower(target.substr(0, scheme_end)) == "http" || lower(target.substr(0, scheme_end)) == "https")) {
    target.remove_prefix(scheme_end + 3);
    const size_t path_at = target.find_first_of("/?");
    target = path_at == std::string_view::npos ? std::string_view() : target.substr(path_at);
    if (target.empty() || target.front() == '?') return "/";
  }
  return std::string(target.substr(0, target.find('?')));
}

}  // namespace

const std::string* Request::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

void RequestParser::reset() {
  state_ = State::head;
  req_ = Request{};
  head_.clear();
  started_ = false;
  keep_body_ = true;
  chunked_ = false;
  content_length_ = body_received_ = 0;
  chunk_ = Chunk::size_line;
  chunk_left_ = 0;
  trailer_bytes_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

void RequestParser::fail(int status, std::string message) {
  state_ = State::error;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t RequestParser::feed(std::string_view in) {
  if (state_ == State::head) return feed_head(in);
  if (state_ == State::body) return chunked_ ? feed_chunked(in) : feed_body(in);
  return 0;
}

size_t RequestParser::feed_head(std::string_view in) {
  size_t used = 0;
  if (!started_) {  // empty lines before a request are ignored (RFC 9112 2.2)
    while (used < in.size() && (in[used] == '\r' || in[used] == '\n')) ++used;
    if (used == in.size()) return used;
    started_ = true;
  }
  // The head ends at the first empty line; bare LF line ends are accepted.
  const size_t old = head_.size();
  const size_t room = limits_.max_head - std::min(limits_.max_head, old);
  const size_t take = std::min(in.size() - used, room + 1);
  head_.append(in.substr(used, take));
  size_t end = std::string::npos;
  for (size_t i = old >= 3 ? old - 3 : 0; i < head_.size(); ++i) {
    if (head_[i] != '\n') continue;
    if (i + 1 < head_.size() && head_[i + 1] == '\n') {
      end = i + 2;
      break;
    }
    if (i + 2 < head_.size() && head_[i + 1] == '\r' && head_[i + 2] == '\n') {
      end = i + 3;
      break;
    }
  }
  if (end == std::string::npos) {
    if (head_.size() > limits_.max_head)
      fail(431, "the request head is larger than " + std::to_string(limits_.max_head) + " bytes");
    return used + take;
  }
  if (end > limits_.max_head) {
    fail(431, "the request head is larger than " + std::to_string(limits_.max_head) + " bytes");
    return used + take;
  }
  const size_t extra = head_.size() - end;  // bytes past the head go back to the caller
  head_.resize(end);
  used += take - extra;
  if (!parse_head()) return used;
  head_.clear();
  return used;
}

bool RequestParser::parse_head() {
  std::vector<std::string_view> lines;
  std::string_view rest(head_);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
    rest.remove_prefix(nl + 1);
  }
  if (lines.empty()) return fail(400, "empty request line"), false;
  // METHOD SP target SP HTTP/1.x
  const std::string_view rl = lines[0];
  const size_t sp1 = rl.find(' '), sp2 = rl.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return fail(400, "malformed request line"), false;
  req_.method = std::string(rl.substr(0, sp1));
  req_.target = std::string(rl.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = rl.substr(sp2 + 1);
  if (req_.method.empty() || !std::all_of(req_.method.begin(), req_.method.end(), is_token_char) ||
      req_.target.empty() || req_.target.find(' ') != std::string::npos)
    return fail(400, "malformed request line"), false;
  if (version == "HTTP/1.1") req_.minor_version = 1;
  else if (version == "HTTP/1.0") req_.minor_version = 0;
  else if (version.substr(0, 5) == "HTTP/") return fail(505, "only HTTP/1.0 and HTTP/1.1 are served"), false;
  else return fail(400, "malformed request line"), false;
  req_.path = path_of(req_.target);

  if (lines.size() - 1 > limits_.max_headers)
    return fail(431, "the request has more than " + std::to_string(limits_.max_headers) + " headers"), false;
  bool have_length = false, conn_close = false, conn_keep = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(line.begin(), line.begin() + static_cast<long>(colon), is_token_char))
      return fail(400, "malformed header line"), false;  // also obsolete line folding
    std::string name = lower(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-length") {
      if (value.empty() || value.size() > 19 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return fail(400, "Content-Length must be a decimal number"), false;
      const uint64_t n = std::stoull(std::string(value));
      if (have_length && n != content_length_) return fail(400, "conflicting Content-Length headers"), false;
      have_length = true;
      content_length_ = n;
    } else if (name == "transfer-encoding") {
      if (lower(value) != "chunked") return fail(501, "only the chunked transfer coding is supported"), false;
      if (chunked_) return fail(400, "Transfer-Encoding given twice"), false;
      chunked_ = true;
    } else if (name == "connection") {
      conn_close = conn_close || has_token(value, "close");
      conn_keep = conn_keep || has_token(value, "keep-alive");
    } else if (name == "expect") {
      if (lower(value) != "100-continue") return fail(417, "only 'Expect: 100-continue' is supported"), false;
      req_.expect_continue = req_.minor_version == 1;
    }
    req_.headers.emplace_back(std::move(name), std::string(value));
  }
  if (have_length && chunked_) return fail(400, "a request cannot have both Content-Length and Transfer-Encoding"), false;
  req_.keep_alive = req_.minor_version == 1 ? !conn_close : conn_keep && !conn_close;
  if (have_length && content_length_ > limits_.max_body)
    return fail(413, "the request body (" + std::to_string(content_length_) + " bytes) is larger than --max-body (" +
                         std::to_string(limits_.max_body) + " bytes)"),
           false;
  req_.has_body = chunked_ || content_length_ > 0;
  state_ = req_.has_body ? State::body : State::complete;
  return true;
}

void RequestParser::add_body(std::string_view bytes) {
  body_received_ += bytes.size();
  if (keep_body_) req_.body.append(bytes);
}

size_t RequestParser::feed_body(std::string_view in) {
  const size_t take = static_cast<size_t>(std::min<uint64_t>(in.size(), content_length_ - body_received_));
  add_body(in.substr(0, take));
  if (body_received_ == content_length_) state_ = State::complete;
  return take;
}

bool RequestParser::parse_chunk_size() {
  std::string_view line(head_);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  line = line.substr(0, line.find(';'));  // chunk extensions are ignored
  line = trim(line);
  if (line.empty() || line.size() > 15) return fail(400, "malformed chunk size"), false;
  uint64_t n = 0;
  for (char c : line) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return fail(400, "malformed chunk size"), false;
    n = n * 16 + static_cast<uint64_t>(d);
  }
  if (n > limits_.max_body - std::min(limits_.max_body, body_received_))
    return fail(413, "the chunked request body is larger than --max-body (" + std::to_string(limits_.max_body) + " bytes)"),
           false;
  chunk_left_ = n;
  return true;
}

size_t RequestParser::feed_chunked(std::string_view in) {
  size_t used = 0;
  while (used < in.size() && state_ == State::body) {
    if (chunk_ == Chunk::data) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(in.size() - used, chunk_left_));
      add_body(in.substr(used, take));
      used += take;
      chunk_left_ -= take;
      if (chunk_left_ == 0) chunk_ = Chunk::data_crlf;
      continue;
    }
    // Line-oriented parts: a chunk size, the CRLF after a chunk's data, the trailers.
    const char c = in[used++];
    if (c != '\n') {
      head_ += c;
      if (head_.size() > limits_.max_head || (chunk_ == Chunk::trailers && ++trailer_bytes_ > limits_.max_head)) {
        fail(400, "a chunk-size line or the trailers are longer than " + std::to_string(limits_.max_head) + " bytes");
        break;
      }
      continue;
    }
    const bool empty = head_.empty() || head_ == "\r";
    if (chunk_ == Chunk::data_crlf) {
      if (!empty) {
        fail(400, "chunk data is not followed by CRLF");
        break;
      }
      chunk_ = Chunk::size_line;
    } else if (chunk_ == Chunk::size_line) {
      if (!parse_chunk_size()) break;
      chunk_ = chunk_left_ == 0 ? Chunk::trailers : Chunk::data;
    } else if (empty) {  // the empty line after the trailers ends the body
      state_ = State::complete;
    }
    head_.clear();
  }
  return used;
}

}  // namespace sluice::tools::http
