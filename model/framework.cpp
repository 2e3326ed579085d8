#include "model/framework.hpp"

#include <array>

namespace tpsim {

const FrameworkDef& framework_def(Framework f) {
  // In the enum's order; each definition names its own id, checked once below.
  static const std::array<const FrameworkDef*, kAllFrameworks.size()> defs = {
      &composer_framework(), &megatron_framework(), &torchtitan_framework()};
  const FrameworkDef& def = *defs[static_cast<size_t>(f)];
  return def;
}

const FrameworkDef& option_owner(FrameworkOption o) {
  for (Framework f : kAllFrameworks)
    if (framework_def(f).owns(o)) return framework_def(f);
  return framework_def(kDefaultFramework);  // unreachable: every option has an owner (test_search)
}

Sharding framework_sharding(Framework f, std::optional<Sharding> asked) {
  const FrameworkDef& def = framework_def(f);
  return def.sharding_strategies ? asked.value_or(def.sharding) : def.sharding;
}

}  // namespace tpsim
