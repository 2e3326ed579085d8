#include "model/framework.hpp"

#include <array>

namespace tpsim {

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
