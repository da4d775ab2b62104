// GpuTier on CUDA (kernels/cuda): built only when the build found nvcc (SLUICE_HAVE_CUDA).
#if SLUICE_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "core/gpu/gpu_tier.h"
#include "core/gpu/vram_expert_cache.h"
#include "core/gpu/vram_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace sluice::core {

namespace {

namespace cuda = kernels::cuda;

constexpr uint64_t kMinMargin = 512ull << 20;    // VRAM left to the driver and other users

// Host -> device bytes per second out of the tier's own page-locked staging (no extra pinned
// memory outside --budget): copies of the whole buffer, 32 MiB or more per timing, best of three
// after a warm-up.
double measure_h2d(cuda::Stream& stream, cuda::PinnedHostBuffer& host, cuda::DeviceBuffer& dev, size_t bytes) {
  std::memset(host.data(), 0, bytes);
  const int copies = static_cast<int>(std::max<size_t>(1, (32u << 20) / bytes));
  cuda::Event start, stop;
  float best = 1e30f;
  for (int rep = 0; rep < 4; ++rep) {
    start.record(stream);
    for (int i = 0; i < copies; ++i) cuda::copy_to_device(dev.data(), host.data(), bytes, stream);
    stop.record(stream);
    stop.synchronize();
    if (rep > 0) best = std::min(best, stop.elapsed_ms_since(start));
  }
  return static_cast<double>(bytes) * copies / (std::max(best, 1e-4f) * 1e-3);
}

// Weight bytes per second of a one-token GPU product, as measure_cpu_matvec_rate times the CPU:
// the largest matrix uploaded to VRAM, best of three timed matvecs after a warm-up. 0 when no
// matrix is resident in VRAM (the cost model then leaves the GPU's product time out).
double measure_gpu_matvec(const cuda::DeviceMatrix& w, uint64_t bytes, float* x, float* y, cuda::Stream& stream) {
  if (bytes == 0) return 0;
  cuda::Event start, stop;
  float best = 1e30f;
  for (int rep = 0; rep < 4; ++rep) {
    start.record(stream);
    cuda::matvec(w, x, y, stream);
    stop.record(stream);
    stop.synchronize();
    if (rep > 0) best = std::min(best, stop.elapsed_ms_since(start));
  }
  return static_cast<double>(bytes) / (std::max(best, 1e-4f) * 1e-3);
}

class CudaTier final : public GpuTier {
 public:
  CudaTier(const cuda::DeviceInfo& info, const GpuModelShape& model, TrackedExpertSource& experts, kernels::ThreadPool& pool,
           int64_t n_batch, std::span<std::byte> host_arena, const GpuTierOptions& options)
      : experts_(experts),
        shape_(model.experts),
        vcache_(0, 0, 0),
        cost_(TierRates{1, 1, 0, 0}) {
    plan_.device = info.name;
    const uint64_t margin = std::max(kMinMargin, info.total_bytes / 20);
    const uint64_t usable = info.free_bytes > margin ? info.free_bytes - margin : 0;
    plan_.vram_budget = options.vram_bytes ? options.vram_bytes : usable;
    if (options.vram_bytes > info.free_bytes)
      throw Error(ErrorCode::budget, "--vram " + human_bytes(options.vram_bytes) + " is more than the free VRAM " +
                                         human_bytes(info.free_bytes) + " of " + info.name);

    // Workspace: activations of `chunk_tokens_` tokens of the widest product, each way; the
    // same page-locked staging that Engine counted in --budget.
    const std::vector<ResidentMatrix>& resident = model.resident;
    const GpuHostStaging st = plan_gpu_host_staging(model, n_batch);
    max_dim_ = st.max_dim;
    chunk_tokens_ = st.chunk_tokens;
    const uint64_t staging = st.buffer_bytes;
    plan_.chunk_tokens = chunk_tokens_;
    plan_.host_staging_bytes = st.total();

    const VramPlan vp = plan_vram(plan_.vram_budget, 2 * vram_align(staging), resident, shape_,
                                  [](GgmlType t) { return cuda::is_supported(t); });
    plan_.workspace_bytes = vp.workspace;
    plan_.resident_bytes = vp.resident_bytes;
    plan_.resident_tensors = vp.resident_on_gpu;
    plan_.resident_on_cpu = vp.resident_on_cpu;
    plan_.resident_cpu_bytes = vp.resident_cpu_bytes;
    plan_.expert_slot_bytes = vp.expert_slot_bytes;
    plan_.expert_slots = vp.expert_slots;
    plan_.routed_experts = shape_.routed_experts;

    dx_ = cuda::DeviceBuffer(staging);
    dy_ = cuda::DeviceBuffer(staging);
    sx_ = cuda::PinnedHostBuffer(staging);
    sy_ = cuda::PinnedHostBuffer(staging);
    if (vp.resident_bytes) resident_ = cuda::DeviceBuffer(vp.resident_bytes);
    if (vp.expert_slots) slots_ = cuda::DeviceBuffer(vp.expert_slots * vp.expert_slot_bytes);
    vcache_ = VramExpertCache(vp.expert_slots, static_cast<int>(model.n_layer), static_cast<int>(model.n_expert),
                              VramExpertCache::parse_policy(options.policy));

    // Upload the resident matrices in the planned places.
    for (size_t i = 0; i < resident.size(); ++i) {
      if (vp.resident_offset[i] < 0) continue;
      std::byte* dst = resident_.data() + vp.resident_offset[i];
      cuda::copy_to_device(dst, resident[i].tensor->data, resident[i].bytes, copy_);
      ranges_.push_back({resident[i].tensor->data, resident[i].bytes, dst});
      c_.upload_bytes += resident[i].bytes;
    }
    copy_.synchronize();
    std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.host < b.host; });

    // Rates for the cost model: measured (H2D, the CPU's and the GPU's one-token products)
    // unless the caller fixed them.
    TierRates rates = options.rates;
    if (!(rates.h2d_bytes_per_s > 0)) rates.h2d_bytes_per_s = measure_h2d(copy_, sx_, dx_, staging);
    if (!(rates.cpu_bytes_per_s > 0)) rates.cpu_bytes_per_s = std::max(1e6, measure_cpu_matvec_rate(model, pool));
    if (!(rates.gpu_bytes_per_s > 0)) {
      size_t pick = resident.size();
      for (size_t i = 0; i < resident.size(); ++i)
        if (vp.resident_offset[i] >= 0 && (pick == resident.size() || resident[i].bytes > resident[pick].bytes)) pick = i;
      if (pick < resident.size()) {
        const Tensor& t = *resident[pick].tensor;
        const cuda::DeviceMatrix w{t.type, resident_.data() + vp.resident_offset[pick], t.ne[0],
                                   t.ne[1] * t.ne[2] * t.ne[3], t.row_bytes};
        rates.gpu_bytes_per_s = measure_gpu_matvec(w, resident[pick].bytes, reinterpret_cast<float*>(dx_.data()),
                                                   reinterpret_cast<float*>(dy_.data()), compute_);
        plan_.gpu_rate_probe_bytes = resident[pick].bytes;
      }
    }
    cost_ = VramCostModel(rates);
    plan_.rates = cost_.rates();

    if (!host_arena.empty()) {
      arena_reg_ = std::make_unique<cuda::HostRegistration>(host_arena.data(), host_arena.size());
      plan_.arena_page_locked = arena_reg_->ok();
    }
    pins_.resize(static_cast<size_t>(std::max<int64_t>(model.n_expert, 1)));
  }

  ~CudaTier() override {
    experts_.set_listener(nullptr);
    try {
      copy_.synchronize();
      compute_.synchronize();
    } catch (const Error&) {  // nothing to do in a destructor; the device is already failing
    }
  }

  const GpuPlan& plan() const override { return plan_; }
  GpuCounters counters() const override { return c_; }
  uint64_t evictions() const override { return vcache_.evictions(); }

  bool try_matmul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y) override {
    if (!deferred_error_.empty()) throw Error(ErrorCode::internal, deferred_error_);
    const std::byte* dev = nullptr;
    int wait_part = -1;
    PinnedExpertPart part;
    if (experts_.find(w.data, part)) {
      dev = expert_device(part, n, wait_part);
    } else if (cuda::is_supported(w.type)) {
      dev = resident_device(w);
      if (dev && !cost_.gpu_product(static_cast<uint64_t>(w.n_rows) * w.row_stride, n)) dev = nullptr;
    }
    if (!dev || std::max(w.n_cols, w.n_rows) > max_dim_) {
      ++c_.products_cpu;
      return false;
    }
    try {
      run({w.type, dev, w.n_cols, w.n_rows, w.row_stride}, wait_part, x, n, y);
    } catch (const Error& e) {
      // A shape the kernels refuse is refused before anything launches: the CPU computes it.
      if (e.code() != ErrorCode::unsupported && e.code() != ErrorCode::invalid_argument) throw;
      ++c_.products_cpu;
      return false;
    }
    ++c_.products_gpu;
    return true;
  }

  // The host bytes of a released expert may be overwritten right after: finish copies from them.
  void on_release(int layer, int expert) override {
    PinState* ps = find_pin(layer, expert);
    if (!ps) return;
    try {
      if (ps->copying) copy_.synchronize();
    } catch (const Error& e) {
      deferred_error_ = e.what();
    }
    if (ps->slot >= 0) vcache_.unpin(ps->slot);
    *ps = PinState{};
  }

 private:
  struct Range {
    const std::byte* host;
    uint64_t bytes;
    std::byte* device;
  };
  struct PinState {
    int layer = -1, expert = -1;
    int64_t slot = -1;  // VRAM slot, -1: computed on the CPU
    bool copying = false;
  };

  const std::byte* resident_device(const kernels::WeightMatrix& w) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), w.data,
                               [](const std::byte* p, const Range& r) { return p < r.host; });
    if (it == ranges_.begin()) return nullptr;
    --it;
    const uint64_t off = static_cast<uint64_t>(w.data - it->host);
    const uint64_t need = static_cast<uint64_t>(w.n_rows) * w.row_stride;
    if (off + need > it->bytes) return nullptr;  // not (all) inside an uploaded matrix
    return it->device + off;
  }

  PinState* find_pin(int layer, int expert) {
    for (PinState& p : pins_)
      if (p.layer == layer && p.expert == expert) return &p;
    return nullptr;
  }

  // Decides once per pin (at its first product, which knows the token count) where the expert runs.
  const std::byte* expert_device(const PinnedExpertPart& p, int64_t n, int& wait_part) {
    PinState* ps = find_pin(p.layer, p.expert);
    if (!ps) {
      ps = find_pin(-1, -1);
      if (!ps) return nullptr;  // more pins than the table holds: the CPU computes it
      *ps = PinState{p.layer, p.expert, -1, false};
      decide(*ps, p, n);
    }
    if (ps->slot < 0) return nullptr;
    if (ps->copying) wait_part = p.part;
    const size_t il = static_cast<size_t>(p.layer);
    return slots_.data() + static_cast<uint64_t>(ps->slot) * plan_.expert_slot_bytes +
           shape_.part_offset[il][static_cast<size_t>(p.part)];
  }

  void decide(PinState& ps, const PinnedExpertPart& p, int64_t n) {
    const kernels::WeightMatrix* parts[] = {&p.weights->gate, &p.weights->up, &p.weights->down};
    const size_t il = static_cast<size_t>(p.layer);
    uint64_t bytes = 0;
    for (int i = 0; i < 3; ++i) {
      const uint64_t b = static_cast<uint64_t>(parts[i]->n_rows) * parts[i]->row_stride;
      if (!cuda::is_supported(parts[i]->type) || b != shape_.part_bytes[il][static_cast<size_t>(i)]) return;
      bytes += b;
    }
    const int64_t hit = vcache_.find(p.layer, p.expert);
    if (hit >= 0) {
      ++c_.expert_hits;
      vcache_.pin(hit);
      ps.slot = hit;
      return;
    }
    ++c_.expert_misses;
    const int64_t slot = cost_.copy_up(bytes, n) ? vcache_.insert(p.layer, p.expert) : -1;
    if (slot < 0) {
      ++c_.expert_cpu_fallbacks;
      return;
    }
    vcache_.pin(slot);
    ps.slot = slot;
    std::byte* base = slots_.data() + static_cast<uint64_t>(slot) * plan_.expert_slot_bytes;
    for (const int i : {1, 0, 2}) {  // in the session's order of use (up, gate, down): up lands first
      cuda::copy_to_device(base + shape_.part_offset[il][static_cast<size_t>(i)], parts[i]->data,
                           shape_.part_bytes[il][static_cast<size_t>(i)], copy_);
      copied_[i].record(copy_);
    }
    ps.copying = true;
    ++c_.experts_copied;
    c_.expert_copy_bytes += bytes;
    c_.upload_bytes += bytes;
  }

  void run(const cuda::DeviceMatrix& w, int wait_part, const float* x, int64_t n, float* y) {
    // The product waits for its own matrix only; the rest of the expert keeps copying.
    if (wait_part >= 0) copied_[wait_part].wait(compute_);
    // Narrower products than the widest one fit more tokens in the staging buffers.
    const int64_t chunk = std::max<int64_t>(1, chunk_tokens_ * max_dim_ / std::max(w.n_cols, w.n_rows));
    float* dx = reinterpret_cast<float*>(dx_.data());
    float* dy = reinterpret_cast<float*>(dy_.data());
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
      const int64_t m = std::min(chunk, n - t0);
      const size_t in = static_cast<size_t>(m * w.n_cols) * 4, out = static_cast<size_t>(m * w.n_rows) * 4;
      std::memcpy(sx_.data(), x + t0 * w.n_cols, in);
      cuda::copy_to_device(dx, sx_.data(), in, compute_);
      if (m == 1) cuda::matvec(w, dx, dy, compute_);
      else cuda::matmul(w, dx, m, dy, compute_);
      cuda::copy_to_host(sy_.data(), dy, out, compute_);
      compute_.synchronize();
      std::memcpy(y + t0 * w.n_rows, sy_.data(), out);
      c_.upload_bytes += in;
      c_.download_bytes += out;
    }
  }

  TrackedExpertSource& experts_;
  ExpertSlotShape shape_;
  VramExpertCache vcache_;
  VramCostModel cost_;
  GpuPlan plan_;
  GpuCounters c_;
  int64_t max_dim_ = 1, chunk_tokens_ = 1;
  cuda::Stream compute_, copy_;
  cuda::Event copied_[3];
  cuda::DeviceBuffer dx_, dy_, resident_, slots_;
  cuda::PinnedHostBuffer sx_, sy_;
  std::unique_ptr<cuda::HostRegistration> arena_reg_;
  std::vector<Range> ranges_;  // uploaded matrices, sorted by host address
  std::vector<PinState> pins_;
  std::string deferred_error_;
};

}  // namespace

bool gpu_tier_built() { return true; }

void require_gpu() {
  if (!cuda::probe()) throw Error(ErrorCode::invalid_argument, "--gpu: no CUDA device found (check the driver with nvidia-smi)");
}

std::unique_ptr<GpuTier> make_gpu_tier(const GpuModelShape& model, TrackedExpertSource& experts, kernels::ThreadPool& pool,
                                       int64_t n_batch, std::span<std::byte> host_arena,
                                       const GpuTierOptions& options) {
  require_gpu();
  const std::optional<cuda::DeviceInfo> info = cuda::probe();
  if (!info) throw Error(ErrorCode::internal, "--gpu: the CUDA device disappeared");
  auto tier = std::make_unique<CudaTier>(*info, model, experts, pool, n_batch, host_arena, options);
  experts.set_listener(tier.get());
  return tier;
}

}  // namespace sluice::core

#endif  // SLUICE_HAVE_CUDA
