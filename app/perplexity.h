// Perplexity and KL divergence over a text, computed the way llama-perplexity computes them, so
// that a number printed by `sluice perplexity` can be set next to llama.cpp's.
//
// The text's tokens (tokenized once, BOS added where the model asks for it) are cut into chunks
// of n_ctx tokens; tokens past the last whole chunk are not used. Each chunk is evaluated from
// position 0 (a fresh context), with its first token replaced by BOS when the model adds BOS.
// Only the second half is scored: the logits at positions first = n_ctx / 2 ... n_ctx - 2
// predict the next token, so a chunk contributes n_ctx - 1 - first negative log-likelihoods.
//   PPL = exp(mean NLL);   error = PPL x sqrt((mean NLL^2 - mean NLL^2) / (count - 1))
// The log-softmax follows llama-perplexity's: max in float, the sum of expf(l - max) in double.
//
// KL divergence (llama-perplexity's --kl-divergence-base / --kl-divergence): a base run saves the
// log-probabilities of every scored position to a file (KlBaseWriter); a later run of another
// quantization of the same model over the same text reads them back (KlBaseReader) and reports
// the mean KL(base || this) and how often both put the same token first. The file is sluice's
// own: a header (magic "SLKLDIV1", n_vocab, n_ctx, number of chunks, a hash of the tokens), then
// per scored position n_vocab float32 log-probabilities, little-endian.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sluice::core {

class Engine;

// What a forward pass over one chunk looks like to the perplexity loop: tokens at positions
// start_pos..., logits for every row. Engine::forward in the CLI; a fake in unit tests.
using ForwardFn = std::function<std::span<const float>(std::span<const int32_t> tokens, int64_t start_pos)>;

struct PerplexityOptions {
  int64_t n_ctx = 0;        // tokens per chunk (>= 4)
  int64_t n_batch = 0;      // most tokens per forward call (a chunk takes ceil(n_ctx / n_batch))
  int64_t max_chunks = -1;  // -1: every whole chunk
  bool add_bos = false;     // replace each chunk's first token with bos
  int32_t bos = 0;
};

struct KlStats {
  double mean = 0, error = 0;  // mean KL divergence and its standard error
  double max = 0;
  double same_top = 0;         // share of positions where base and this run agree on the argmax
};

struct PerplexityResult {
  double ppl = 0, ppl_error = 0;
  int64_t scored = 0;            // positions scored
  std::vector<double> chunk_ppl;  // running PPL after each chunk (llama-perplexity's [i]x list)
  bool has_kl = false;
  KlStats kl;
};

class KlBaseWriter {
 public:
  KlBaseWriter(const std::string& path, int64_t n_vocab, int64_t n_ctx, int64_t n_chunks,
               std::span<const int32_t> tokens);
  ~KlBaseWriter();
  void write_row(std::span<const float> log_probs);
  void close();

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

class KlBaseReader {
 public:
  // Error(invalid_argument) when the file is not a KL base of this model, context and text.
  KlBaseReader(const std::string& path, int64_t n_vocab, int64_t n_ctx, int64_t n_chunks,
               std::span<const int32_t> tokens);
  ~KlBaseReader();
  void read_row(std::span<float> log_probs);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

// Whole chunks the text holds; Error(invalid_argument) below two chunks' worth of tokens
// (llama-perplexity's "you need at least 2*n_ctx tokens").
int64_t perplexity_chunks(int64_t n_tokens, const PerplexityOptions& o);

// Runs every chunk through `forward`; `progress(done, total)` after each chunk. `base_out` and
// `base_in` are optional (KL base to write, or to compare with).
PerplexityResult compute_perplexity(const ForwardFn& forward, int64_t n_vocab, std::span<const int32_t> tokens,
                                    const PerplexityOptions& o, KlBaseWriter* base_out, KlBaseReader* base_in,
                                    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sluice::core
