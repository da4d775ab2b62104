#include "synth/synth_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace sluice::core::synth {
namespace {

// llama_ftype ids (llama.h).
constexpr FileType kFileTypes[] = {
    {"F32", 0, GgmlType::F32},        {"F16", 1, GgmlType::F16},       {"BF16", 32, GgmlType::BF16},
    {"Q4_0", 2, GgmlType::Q4_0},      {"Q4_1", 3, GgmlType::Q4_1},     {"Q5_0", 8, GgmlType::Q5_0},
    {"Q5_1", 9, GgmlType::Q5_1},      {"Q8_0", 7, GgmlType::Q8_0},     {"Q2_K", 10, GgmlType::Q2_K},
    {"Q3_K_S", 11, GgmlType::Q3_K},   {"Q3_K_M", 12, GgmlType::Q3_K},  {"Q3_K_L", 13, GgmlType::Q3_K},
    {"Q4_K_S", 14, GgmlType::Q4_K},   {"Q4_K_M", 15, GgmlType::Q4_K},  {"Q5_K_S", 16, GgmlType::Q5_K},
    {"Q5_K_M", 17, GgmlType::Q5_K},   {"Q6_K", 18, GgmlType::Q6_K},    {"MXFP4_MOE", 38, GgmlType::MXFP4},
    {"IQ2_XXS", 19, GgmlType::IQ2_XXS}, {"IQ2_XS", 20, GgmlType::IQ2_XS}, {"IQ3_XXS", 23, GgmlType::IQ3_XXS},
    {"IQ1_S", 24, GgmlType::IQ1_S},   {"IQ4_NL", 25, GgmlType::IQ4_NL}, {"IQ3_S", 26, GgmlType::IQ3_S},
    {"IQ2_S", 28, GgmlType::IQ2_S},   {"IQ4_XS", 30, GgmlType::IQ4_XS}, {"IQ1_M", 31, GgmlType::IQ1_M},
    {"TQ1_0", 36, GgmlType::TQ1_0},   {"TQ2_0", 37, GgmlType::TQ2_0},
};

bool low_bit_iquant(std::string_view f) {
  return f == "IQ1_S" || f == "IQ1_M" || f == "IQ2_XXS" || f == "IQ2_XS" || f == "IQ2_S";
}
bool is_iquant_type(GgmlType t) {
  switch (t) {
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return 0;
  int v = 0;
  for (size_t i = 4; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) v = v * 10 + (name[i] - '0');
  return v;
}

bool is_quantized(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

void put_f16(std::byte* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
void fill_bytes(Rng& rng, std::byte* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(p + i, &r, 8);
  }
  if (i < n) {
    const uint64_t r = rng.next();
    std::memcpy(p + i, &r, n - i);
  }
}

// 4096 standard normal values, made once; F16/F32/BF16 tensors draw from it.
const std::vector<float>& normal_pool() {
  static const std::vector<float> pool = [] {
    std::vector<float> p(4096);
    Rng r(0x5EEDull);
    for (float& v : p) v = static_cast<float>(r.normal());
    return p;
  }();
  return pool;
}

// Packs 8 (scale, min) 6-bit pairs the way ggml's get_scale_min_k4 unpacks them.
void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, std::byte* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = std::byte(static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6)));
    q[j + 4] = std::byte(static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6)));
    q[j + 8] = std::byte(static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4)));
  }
}

// Q4_K/Q5_K: 8 sub-blocks of 32 with scale in 1..8 and min chosen to centre the sub-block:
// value = d*sc*q - dmin*m with m*dmin ~ sc*d*mean(q).
void fill_k_scales(Rng& rng, std::byte* q, double mean_q, double dmin_over_d) {
  uint8_t sc[8], m[8];
  uint64_t r = rng.next();
  for (int j = 0; j < 8; ++j, r >>= 3) {
    sc[j] = static_cast<uint8_t>(1 + (r & 7));
    m[j] = static_cast<uint8_t>(std::min(63L, std::lround(sc[j] * mean_q / dmin_over_d)));
  }
  pack_scale_min_k4(sc, m, q);
}

}  // namespace

const FileType& parse_file_type(std::string_view name) {
  std::string up(name);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (up == "MXFP4") up = "MXFP4_MOE";
  for (const FileType& f : kFileTypes)
    if (f.name == up) return f;
  throw Error(ErrorCode::invalid_argument,
              "--quant: unknown quantization '" + std::string(name) + "' (known: " + file_type_names() + ")");
}

std::string file_type_names() {
  std::string s;
  for (const FileType& f : kFileTypes) {
    if (!s.empty()) s += ", ";
    s += f.name;
  }
  return s;
}

GgmlType choose_tensor_type(const FileType& ft, const QuantModelInfo& model, std::string_view name,
                            const int64_t* ne, uint32_t n_dims, int i_attention_wv, int i_ffn_down) {
  // What llama-quantize leaves alone.
  if (!ends_with(name, "weight") || n_dims < 2 || contains(name, "_norm.weight") ||
      contains(name, "ffn_gate_inp.weight") || contains(name, "ssm_conv1d"))
    return GgmlType::F32;
  if (!is_quantized(ft.base)) return ft.base;

  const std::string_view f = ft.name;
  const bool eight_experts = model.n_expert == 8;
  const uint32_t n_gqa = model.n_head_kv ? model.n_head / model.n_head_kv : 1;
  const int n_layer = static_cast<int>(model.n_layer);
  const int il = layer_of(name);
  GgmlType t = ft.base;

  const bool low_bit = low_bit_iquant(f);
  if (name == "output.weight") {
    if (f == "MXFP4_MOE" || ne[0] % ggml_traits(t).block_size != 0) t = GgmlType::Q8_0;
    else if (low_bit || f == "IQ3_XXS") t = GgmlType::Q5_K;
    else if (t != GgmlType::Q8_0) t = GgmlType::Q6_K;
  } else if (f == "MXFP4_MOE") {
    t = n_dims >= 3 && ne[2] > 1 ? GgmlType::MXFP4 : GgmlType::Q8_0;
  } else if (name == "token_embd.weight") {
    if (f == "IQ1_S" || f == "IQ1_M" || f == "IQ2_XXS" || f == "IQ2_XS") t = GgmlType::Q2_K;
    else if (f == "IQ2_S" || f == "IQ3_XXS") t = GgmlType::IQ3_S;
    else if (f == "TQ1_0" || f == "TQ2_0") t = GgmlType::Q4_K;
  } else if (low_bit) {
    const GgmlType step = f == "IQ2_S" ? GgmlType::IQ3_S : GgmlType::Q2_K;
    if (contains(name, "attn_v.weight")) {
      t = n_gqa >= 4 || model.n_expert >= 4 ? GgmlType::Q4_K : step;
    } else if (eight_experts && contains(name, "attn_k.weight")) {
      t = GgmlType::Q4_K;
    } else if (contains(name, "ffn_down")) {
      const int id = i_ffn_down >= 0 ? i_ffn_down : il;
      const int nd = model.n_ffn_down ? static_cast<int>(model.n_ffn_down) : n_layer;
      if (id < nd / 8) t = step;
    } else if (contains(name, "attn_output.weight")) {
      if (eight_experts) t = GgmlType::Q5_K;
      else if (f == "IQ1_S" || f == "IQ1_M") t = GgmlType::IQ2_XXS;
      else if (f == "IQ2_S") t = GgmlType::IQ3_S;
    }
  } else if (contains(name, "attn_v.weight") && (f == "IQ3_XXS" || f == "IQ3_S" || f == "IQ4_XS" || f == "IQ4_NL")) {
    if (n_gqa >= 4) t = f == "IQ3_XXS" || f == "IQ3_S" ? GgmlType::Q4_K : GgmlType::Q5_K;
    if (eight_experts) t = GgmlType::Q8_0;
  } else if (contains(name, "attn_output.weight") && (f == "IQ3_XXS" || f == "IQ3_S" || f == "IQ4_XS" || f == "IQ4_NL")) {
    if (eight_experts) t = GgmlType::Q5_K;
    else if (f == "IQ3_XXS") t = GgmlType::IQ3_S;
  } else if (contains(name, "attn_v.weight")) {
    // i_attention_wv counts attn_v tensors in file order.
    const int iv = i_attention_wv >= 0 ? i_attention_wv : il;
    const int nv = model.n_attention_wv ? static_cast<int>(model.n_attention_wv) : n_layer;
    if (f == "Q2_K") t = n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    else if (f == "Q3_K_M") t = iv < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    else if (f == "Q3_K_L") t = GgmlType::Q5_K;
    else if ((f == "Q4_K_M" || f == "Q5_K_M") && use_more_bits(iv, nv)) t = GgmlType::Q6_K;
    else if (f == "Q4_K_S" && iv < 4) t = GgmlType::Q5_K;
    if (eight_experts) t = GgmlType::Q8_0;
  } else if (contains(name, "attn_k.weight")) {
    if (eight_experts) t = GgmlType::Q8_0;
  } else if (contains(name, "ffn_down")) {
    if (f == "Q2_K") t = GgmlType::Q3_K;
    else if (f == "Q3_K_M") t = il < n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    else if (f == "Q3_K_L") t = GgmlType::Q5_K;
    else if ((f == "Q4_K_M" || f == "Q5_K_M") && use_more_bits(il, n_layer)) t = GgmlType::Q6_K;
    else if (f == "Q4_K_S" && il < n_layer / 8) t = GgmlType::Q5_K;
  } else if (contains(name, "attn_output.weight")) {
    if (eight_experts) {
      if (f == "Q2_K" || f == "Q3_K_S" || f == "Q3_K_M" || f == "Q4_K_S" || f == "Q4_K_M") t = GgmlType::Q5_K;
    } else {
      if (f == "Q2_K") t = GgmlType::Q3_K;
      else if (f == "Q3_K_M") t = GgmlType::Q4_K;
      else if (f == "Q3_K_L") t = GgmlType::Q5_K;
    }
  }

  if (ne[0] % ggml_traits(t).block_size != 0) {
    if (is_iquant_type(t)) t = GgmlType::IQ4_NL;
    switch (t) {
      case GgmlType::TQ1_0:
      case GgmlType::TQ2_0:
      case GgmlType::Q2_K:
      case GgmlType::Q3_K: t = GgmlType::Q4_0; break;
      case GgmlType::Q4_K: t = GgmlType::Q5_0; break;
      case GgmlType::Q5_K: t = GgmlType::Q5_1; break;
      case GgmlType::Q6_K: t = GgmlType::Q8_0; break;
      default: break;
    }
    if (ne[0] % ggml_traits(t).block_size != 0) t = GgmlType::F16;
  }
  return t;
}

bool can_generate(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0:
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::MXFP4:
      return true;
    default:
      return is_random_block_type(type);
  }
}

void fill_random(GgmlType type, Rng& rng, float std, std::span<std::byte> dst) {
  const GgmlTypeTraits& tr = ggml_traits(type);
  if (!can_generate(type))
    throw Error(ErrorCode::unsupported, "synth cannot generate " + std::string(tr.name) + " blocks");
  if (is_random_block_type(type)) return fill_random_blocks_scaled(type, rng, std, dst);
  if (dst.size() % tr.type_size != 0)
    throw Error(ErrorCode::internal, "fill_random: " + std::to_string(dst.size()) + " bytes is not a whole number of " +
                std::string(tr.name) + " blocks");
  std::byte* p = dst.data();
  const size_t n_blocks = dst.size() / tr.type_size;
  const double s = std;
  switch (type) {
    case GgmlType::F32: {
      const auto& pool = normal_pool();
      for (size_t i = 0; i < n_blocks;) {
        uint64_t r = rng.next();
        for (int k = 0; k < 5 && i < n_blocks; ++k, ++i, r >>= 12) {
          const float v = static_cast<float>(pool[r & 4095] * s);
          std::memcpy(p + 4 * i, &v, 4);
        }
      }
      break;
    }
    case GgmlType::F16:
    case GgmlType::BF16: {
      const auto& pool = normal_pool();
      for (size_t i = 0; i < n_blocks;) {
        uint64_t r = rng.next();
        for (int k = 0; k < 5 && i < n_blocks; ++k, ++i, r >>= 12) {
          const float v = static_cast<float>(pool[r & 4095] * s);
          uint16_t h;
          if (type == GgmlType::F16) {
            h = f32_to_f16(v);
          } else {
            uint32_t x;
            std::memcpy(&x, &v, 4);
            h = static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
          }
          std::memcpy(p + 2 * i, &h, 2);
        }
      }
      break;
    }
    case GgmlType::Q8_0:  // d | i8 qs[32]; value = d*q, q uniform in [-128, 127] (std 73.9)
      for (size_t b = 0; b < n_blocks; ++b, p += 34) {
        put_f16(p, static_cast<float>(s / 73.9));
        fill_bytes(rng, p + 2, 32);
      }
      break;
    case GgmlType::Q4_0:  // d | qs[16]; value = d*(q-8) (std 4.61)
      for (size_t b = 0; b < n_blocks; ++b, p += 18) {
        put_f16(p, static_cast<float>(s / 4.61));
        fill_bytes(rng, p + 2, 16);
      }
      break;
    case GgmlType::Q4_1:  // d | m | qs[16]; value = d*q + m
      for (size_t b = 0; b < n_blocks; ++b, p += 20) {
        const double d = s / 4.61;
        put_f16(p, static_cast<float>(d));
        put_f16(p + 2, static_cast<float>(-7.5 * d));
        fill_bytes(rng, p + 4, 16);
      }
      break;
    case GgmlType::Q5_0:  // d | qh[4] | qs[16]; value = d*(q-16) (std 9.23)
      for (size_t b = 0; b < n_blocks; ++b, p += 22) {
        put_f16(p, static_cast<float>(s / 9.23));
        fill_bytes(rng, p + 2, 20);
      }
      break;
    case GgmlType::Q5_1:  // d | m | qh[4] | qs[16]; value = d*q + m
      for (size_t b = 0; b < n_blocks; ++b, p += 24) {
        const double d = s / 9.23;
        put_f16(p, static_cast<float>(d));
        put_f16(p + 2, static_cast<float>(-15.5 * d));
        fill_bytes(rng, p + 4, 20);
      }
      break;
    case GgmlType::Q2_K: {
      // scales[16] (lo: scale 1..10, hi: min = round(1.5*scale)) | qs[64] | d | dmin (= d).
      // value = d*sc*q - d*m, q in 0..3: near zero mean per sub-block; std ~ d*6.2*1.118.
      static const std::array<uint8_t, 16> kSc = [] {
        std::array<uint8_t, 16> t{};
        for (int n = 0; n < 16; ++n) {
          const int sc = 1 + n * 10 / 16;
          t[n] = static_cast<uint8_t>(sc | (std::min(15, static_cast<int>(std::lround(1.5 * sc))) << 4));
        }
        return t;
      }();
      const float d = static_cast<float>(s / (6.2 * 1.118));
      for (size_t b = 0; b < n_blocks; ++b, p += 84) {
        uint64_t r = rng.next();
        for (int j = 0; j < 16; ++j, r >>= 4) p[j] = std::byte(kSc[r & 15]);
        fill_bytes(rng, p + 16, 64);
        put_f16(p + 80, d);
        put_f16(p + 82, d);
      }
      break;
    }
    case GgmlType::Q3_K:  // hmask[32] | qs[64] | scales[12] (6-bit, minus 32) | d; q3 in -4..3
      for (size_t b = 0; b < n_blocks; ++b, p += 110) {
        fill_bytes(rng, p, 108);
        put_f16(p + 108, static_cast<float>(s / (18.5 * 2.29)));
      }
      break;
    case GgmlType::Q4_K:  // d | dmin | scales[12] | qs[128]; q in 0..15
      for (size_t b = 0; b < n_blocks; ++b, p += 144) {
        const double d = s / (5.05 * 4.61);
        put_f16(p, static_cast<float>(d));
        put_f16(p + 2, static_cast<float>(d));
        fill_k_scales(rng, p + 4, 7.5, 1.0);
        fill_bytes(rng, p + 16, 128);
      }
      break;
    case GgmlType::Q5_K:  // d | dmin | scales[12] | qh[32] | qs[128]; q in 0..31
      for (size_t b = 0; b < n_blocks; ++b, p += 176) {
        const double d = s / (5.05 * 9.23);
        put_f16(p, static_cast<float>(d));
        put_f16(p + 2, static_cast<float>(2 * d));
        fill_k_scales(rng, p + 4, 15.5, 2.0);
        fill_bytes(rng, p + 16, 160);
      }
      break;
    case GgmlType::Q6_K:  // ql[128] | qh[64] | i8 scales[16] | d; value = d*sc*(q-32)
      for (size_t b = 0; b < n_blocks; ++b, p += 210) {
        fill_bytes(rng, p, 208);
        put_f16(p + 208, static_cast<float>(s / (73.9 * 18.5)));
      }
      break;
    case GgmlType::MXFP4: {  // e (E8M0, value scale 2^(e-128)) | qs[16] (e2m1 codes, rms 5.85)
      const int e0 = 128 + static_cast<int>(std::lround(std::log2(std::max(s, 1e-30) / 5.85)));
      const uint8_t e = static_cast<uint8_t>(std::clamp(e0, 1, 254));
      for (size_t b = 0; b < n_blocks; ++b, p += 17) {
        p[0] = std::byte(e);
        fill_bytes(rng, p + 1, 16);
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace sluice::core::synth
