#include "cache/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "common/error.h"
#include "common/huge_pages.h"
#include "common/units.h"

namespace sluice::cache {

uint64_t CachePlan::total_slots() const {
  uint64_t n = 0;
  for (const auto& c : classes) n += c.n_slots;
  return n;
}

CachePlan plan_cache(const ShardLayout& layout, uint64_t budget_bytes, uint32_t alignment) {
  CachePlan plan;
  std::map<uint64_t, size_t> by_size;
  plan.class_of_layer.resize(layout.n_layer());
  for (uint32_t l = 0; l < layout.n_layer(); ++l) {
    uint64_t sb = slot_bytes(layout, l, alignment);
    auto [it, inserted] = by_size.try_emplace(sb, plan.classes.size());
    if (inserted) plan.classes.push_back({sb, 0, 0, {}});
    plan.classes[it->second].layers.push_back(l);
    plan.class_of_layer[l] = static_cast<uint32_t>(it->second);
  }
  const uint64_t k = layout.n_expert_used;
  std::string why;
  for (const auto& c : plan.classes) {
    plan.min_bytes = checked_add(plan.min_bytes, checked_mul(k, c.slot_bytes, "working set"), "working set");
    why += (why.empty() ? "" : " + ") + std::to_string(k) + " x " + human_bytes(c.slot_bytes);
  }
  if (budget_bytes < plan.min_bytes) {
    throw Error(ErrorCode::budget, "expert cache budget " + human_bytes(budget_bytes) +
                                       " cannot hold one layer's working set of " + std::to_string(k) +
                                       " experts per slot size (" + why + "); the minimum is " +
                                       human_bytes(plan.min_bytes) + " (" + std::to_string(plan.min_bytes) +
                                       " bytes)");
  }
  // Working set first, then the rest in proportion to each class's total expert bytes.
  double weight_total = 0;
  for (auto& c : plan.classes) {
    c.n_slots = k;
    weight_total += static_cast<double>(c.slot_bytes) * c.layers.size() * layout.n_expert;
  }
  uint64_t left = budget_bytes - plan.min_bytes;
  const uint64_t spare = left;
  for (auto& c : plan.classes) {
    uint64_t cap = static_cast<uint64_t>(c.layers.size()) * layout.n_expert;
    double share = static_cast<double>(c.slot_bytes) * c.layers.size() * layout.n_expert / weight_total;
    uint64_t extra = std::min<uint64_t>(static_cast<uint64_t>(share * static_cast<double>(spare)) / c.slot_bytes,
                                        cap - c.n_slots);
    c.n_slots += extra;
    left -= extra * c.slot_bytes;
  }
  // Hand what rounding left to the largest slots that still fit.
  std::vector<size_t> order(plan.classes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return plan.classes[a].slot_bytes > plan.classes[b].slot_bytes; });
  for (size_t i : order) {
    auto& c = plan.classes[i];
    uint64_t cap = static_cast<uint64_t>(c.layers.size()) * layout.n_expert;
    while (left >= c.slot_bytes && c.n_slots < cap) {
      ++c.n_slots;
      left -= c.slot_bytes;
    }
  }
  for (auto& c : plan.classes) {
    c.arena_offset = plan.arena_bytes;
    plan.arena_bytes += c.n_slots * c.slot_bytes;
  }
  return plan;
}

Arena::Arena(uint64_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::budget, "cannot map the " + human_bytes(bytes) + " expert-cache arena: " +
                                       std::strerror(errno));
  }
  data_ = static_cast<std::byte*>(p);
  advise_huge_pages(data_, bytes);  // slots are read by every matvec: keep their TLB walks short
}

Arena::~Arena() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace sluice::cache
