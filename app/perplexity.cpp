#include "app/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <xxhash.h>

#include "common/error.h"

namespace sluice::core {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'K', 'L', 'D', 'I', 'V', '1'};

struct KlHeader {
  char magic[8];
  int64_t n_vocab, n_ctx, n_chunks;
  uint64_t tokens_hash;
};

uint64_t hash_tokens(std::span<const int32_t> tokens) { return XXH3_64bits(tokens.data(), tokens.size_bytes()); }

KlHeader make_header(int64_t n_vocab, int64_t n_ctx, int64_t n_chunks, std::span<const int32_t> tokens) {
  KlHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.n_vocab = n_vocab;
  h.n_ctx = n_ctx;
  h.n_chunks = n_chunks;
  h.tokens_hash = hash_tokens(tokens);
  return h;
}

// llama-perplexity's log_softmax of one token: max in float, the sum of exps in double.
double log_prob_of(std::span<const float> logits, int32_t tok) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum_exp = 0.0;
  for (float l : logits) sum_exp += std::exp(l - max_logit);
  return static_cast<double>(logits[static_cast<size_t>(tok)] - max_logit) - std::log(sum_exp);
}

// Every entry's log-probability, the same way (for the KL divergence).
void log_softmax(std::span<const float> logits, std::span<float> out) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum_exp = 0.0;
  for (float l : logits) sum_exp += std::exp(l - max_logit);
  const double log_sum = std::log(sum_exp);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(static_cast<double>(logits[i] - max_logit) - log_sum);
}

size_t argmax(std::span<const float> v) { return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

// Accumulates a mean and its standard error the way llama-perplexity reports them.
struct MeanAndError {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  void add(double v) {
    sum += v;
    sum2 += v * v;
    ++n;
  }
  double mean() const { return n ? sum / static_cast<double>(n) : 0; }
  double error() const {
    if (n < 2) return 0;
    const double m = mean();
    const double var = sum2 / static_cast<double>(n) - m * m;
    return var > 0 ? std::sqrt(var / static_cast<double>(n - 1)) : 0;
  }
};

}  // namespace

KlBaseWriter::KlBaseWriter(const std::string& path, int64_t n_vocab, int64_t n_ctx, int64_t n_chunks,
                           std::span<const int32_t> tokens)
    : path_(path), f_(std::fopen(path.c_str(), "wb")) {
  if (!f_) throw Error(ErrorCode::io_error, "cannot write the KL base '" + path + "': " + std::strerror(errno));
  const KlHeader h = make_header(n_vocab, n_ctx, n_chunks, tokens);
  if (std::fwrite(&h, sizeof h, 1, f_) != 1) throw Error(ErrorCode::io_error, "write to '" + path_ + "' failed");
}

KlBaseWriter::~KlBaseWriter() {
  if (f_) std::fclose(f_);
}

void KlBaseWriter::write_row(std::span<const float> log_probs) {
  if (std::fwrite(log_probs.data(), sizeof(float), log_probs.size(), f_) != log_probs.size())
    throw Error(ErrorCode::io_error, "write to '" + path_ + "' failed (disk full?)");
}

void KlBaseWriter::close() {
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw Error(ErrorCode::io_error, "closing '" + path_ + "' failed (disk full?)");
}

KlBaseReader::KlBaseReader(const std::string& path, int64_t n_vocab, int64_t n_ctx, int64_t n_chunks,
                           std::span<const int32_t> tokens)
    : path_(path), f_(std::fopen(path.c_str(), "rb")) {
  if (!f_) throw Error(ErrorCode::invalid_argument, "cannot open the KL base '" + path + "': " + std::strerror(errno));
  KlHeader h{};
  if (std::fread(&h, sizeof h, 1, f_) != 1 || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw Error(ErrorCode::invalid_argument, "'" + path + "' is not a KL base written by sluice perplexity --kl-base-out");
  const KlHeader want = make_header(n_vocab, n_ctx, n_chunks, tokens);
  if (h.n_vocab != want.n_vocab)
    throw Error(ErrorCode::invalid_argument, "the KL base '" + path + "' has a vocabulary of " + std::to_string(h.n_vocab) +
                                                 " tokens; this model has " + std::to_string(n_vocab));
  if (h.n_ctx != want.n_ctx || h.n_chunks < want.n_chunks)
    throw Error(ErrorCode::invalid_argument, "the KL base '" + path + "' was made with -c " + std::to_string(h.n_ctx) + " over " +
                                                 std::to_string(h.n_chunks) + " chunks; this run is -c " + std::to_string(n_ctx) +
                                                 " over " + std::to_string(n_chunks));
  if (h.tokens_hash != want.tokens_hash)
    throw Error(ErrorCode::invalid_argument, "the KL base '" + path + "' was made from another text (its tokens differ)");
}

KlBaseReader::~KlBaseReader() {
  if (f_) std::fclose(f_);
}

void KlBaseReader::read_row(std::span<float> log_probs) {
  if (std::fread(log_probs.data(), sizeof(float), log_probs.size(), f_) != log_probs.size())
    throw Error(ErrorCode::invalid_argument, "the KL base '" + path_ + "' ends early (truncated)");
}

int64_t perplexity_chunks(int64_t n_tokens, const PerplexityOptions& o) {
  if (o.n_ctx < 4) throw Error(ErrorCode::invalid_argument, "-c " + std::to_string(o.n_ctx) + " is too small for perplexity (at least 4)");
  if (n_tokens < 2 * o.n_ctx)
    throw Error(ErrorCode::invalid_argument, "the text has " + std::to_string(n_tokens) + " tokens; perplexity at -c " +
                                                 std::to_string(o.n_ctx) + " needs at least 2 x " + std::to_string(o.n_ctx) +
                                                 " (use a longer text or a smaller -c)");
  const int64_t whole = n_tokens / o.n_ctx;
  return o.max_chunks < 0 ? whole : std::min(whole, o.max_chunks);
}

PerplexityResult compute_perplexity(const ForwardFn& forward, int64_t n_vocab, std::span<const int32_t> tokens,
                                    const PerplexityOptions& o, KlBaseWriter* base_out, KlBaseReader* base_in,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t n_chunks = perplexity_chunks(static_cast<int64_t>(tokens.size()), o);
  if (o.n_batch < 1) throw Error(ErrorCode::invalid_argument, "-b must be at least 1");
  const int64_t first = o.n_ctx / 2;
  const size_t vocab = static_cast<size_t>(n_vocab);
  std::vector<int32_t> chunk(static_cast<size_t>(o.n_ctx));
  // Logits of the scored half of a chunk, kept across its forward calls.
  std::vector<float> scored_rows(static_cast<size_t>(o.n_ctx - first) * vocab);
  std::vector<float> mine, base;
  if (base_out || base_in) mine.resize(vocab);
  if (base_in) base.resize(vocab);

  PerplexityResult r;
  MeanAndError nll, kld;
  int64_t same_top = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::copy_n(tokens.begin() + c * o.n_ctx, o.n_ctx, chunk.begin());
    const int32_t first_token = chunk[0];
    if (o.add_bos) chunk[0] = o.bos;
    for (int64_t start = 0; start < o.n_ctx; start += o.n_batch) {
      const int64_t n = std::min(o.n_batch, o.n_ctx - start);
      std::span<const float> rows = forward({chunk.data() + start, static_cast<size_t>(n)}, start);
      // Keep the rows at positions >= first.
      for (int64_t i = std::max(start, first); i < start + n; ++i)
        std::copy_n(rows.begin() + (i - start) * n_vocab, vocab, scored_rows.begin() + (i - first) * n_vocab);
    }
    chunk[0] = first_token;
    for (int64_t pos = first; pos < o.n_ctx - 1; ++pos) {
      std::span<const float> logits(scored_rows.data() + (pos - first) * n_vocab, vocab);
      nll.add(-log_prob_of(logits, chunk[static_cast<size_t>(pos + 1)]));
      if (mine.empty()) continue;
      log_softmax(logits, mine);
      if (base_out) base_out->write_row(mine);
      if (!base_in) continue;
      base_in->read_row(base);
      double d = 0;
      for (size_t j = 0; j < vocab; ++j) d += std::exp(static_cast<double>(base[j])) * (static_cast<double>(base[j]) - mine[j]);
      kld.add(d);
      r.kl.max = std::max(r.kl.max, d);
      same_top += argmax(base) == argmax(mine);
    }
    r.chunk_ppl.push_back(std::exp(nll.mean()));
    if (progress) progress(c + 1, n_chunks);
  }
  r.scored = nll.n;
  r.ppl = std::exp(nll.mean());
  r.ppl_error = nll.error() * r.ppl;
  if (base_in) {
    r.has_kl = true;
    r.kl.mean = kld.mean();
    r.kl.error = kld.error();
    r.kl.same_top = static_cast<double>(same_top) / static_cast<double>(std::max<int64_t>(1, kld.n));
  }
  return r;
}

}  // namespace sluice::core
