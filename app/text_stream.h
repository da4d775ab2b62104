// TextStream: the text of generated tokens, cut at stop strings.
//
// Pieces (Tokenizer::token_to_piece) go in one at a time; what comes out is whole UTF-8
// characters only, with the tail that could still grow into a stop string held back. Once a stop
// string appears (it may span any number of pieces), stopped() is true and the text ends before
// it; later pieces are ignored. Used by the generate loop's stop condition (app/generate.h) and by
// serve's HTTP front, which cuts the text it sends the same way.
//
// The buffers grow with the text; reserve() sizes them once for a known length so that push()
// does not allocate on the token path.
#pragma once

#include <string>
#include <vector>

namespace sluice::core {

class TextStream {
 public:
  TextStream() = default;
  explicit TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Starts again with these stop strings (the buffers keep their capacity).
  void reset(const std::vector<std::string>& stops);
  void reserve(size_t bytes);
  // Adds a piece; returns the text now safe to send.
  std::string push(const std::string& piece);
  // At the end: the rest (an incomplete UTF-8 tail becomes U+FFFD when the caller encodes it).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return sent_; }  // everything returned so far

 private:
  std::vector<std::string> stops_;
  std::string buf_, sent_;
  bool stopped_ = false;
};

// Length of the longest prefix of s that ends on a whole UTF-8 character.
size_t utf8_whole(const std::string& s);

}  // namespace sluice::core
