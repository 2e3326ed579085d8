// The last few costings an evaluator made (MegatronEvaluator, TorchtitanEvaluator), each under the
// configuration it was made for. A search asks for the same configuration many times in a row with
// only the global batch changing; a handful of entries serves it without a hash map.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "model/training.hpp"

namespace tpsim {

// `Costs` has a member `key` (the configuration). Entries are replaced oldest first; an entry counts
// only once its costing is committed, so one whose costing threw is never found again. `Costs` may
// be incomplete where this is declared; the owner's destructor must see it complete.
template <class Costs, size_t N = 4>
class RecentCosts {
 public:
  // The committed entry whose key `same(key)` accepts, or nullptr.
  template <class Same>
  const Costs* find(const Same& same) const {
    for (size_t i = 0; i < N; ++i)
      if (committed_[i] && same(slots_[i]->key)) return slots_[i].get();
    return nullptr;
  }
  // The oldest entry, uncommitted, to cost into (its storage reused).
  Costs& start() {
    current_ = next_;
    next_ = (next_ + 1) % N;
    committed_[current_] = false;
    if (!slots_[current_]) slots_[current_] = std::make_unique<Costs>();
    return *slots_[current_];
  }
  // The entry start() returned is complete.
  void commit() { committed_[current_] = true; }

  // The committed entry costed for `cfg` (the same in all but its global batch), or nullptr.
  const Costs* find(const TrainConfig& cfg) const {
    return find([&cfg](const TrainConfig& k) { return same_but_global_batch(k, cfg); });
  }
  // start() for `cfg`, its key set (global batch 0: a costing holds for every global batch).
  Costs& start(const TrainConfig& cfg) {
    Costs& c = start();
    c.key = cfg;
    c.key.global_batch = 0;
    return c;
  }

 private:
  std::array<std::unique_ptr<Costs>, N> slots_;
  std::array<bool, N> committed_{};
  size_t next_ = 0, current_ = 0;
};

}  // namespace tpsim
