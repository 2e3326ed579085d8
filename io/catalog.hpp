// Model architectures by name: the shipped catalogue (data/models/mpt.yaml) plus any --models
// files, each a YAML map from a model name to a block of llm-foundry `model:` keys.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/architecture.hpp"

namespace tpsim {

class ModelCatalog {
 public:
  // The shipped catalogue.
  static ModelCatalog load_default();

  // Adds the models of a YAML file; a name already present is replaced. Keys the simulator does
  // not know are reported through `warnings`; missing required keys and bad values are an Error.
  void add_file(const std::filesystem::path& path, std::vector<std::string>& warnings);
  void add_yaml(const std::string& text, const std::string& origin, std::vector<std::string>& warnings);

  const ModelConfig* find(std::string_view name) const;
  const ModelConfig& get(std::string_view name) const;  // Error naming the known models if absent
  const std::vector<ModelConfig>& models() const { return models_; }

  // "125m..70b" (catalogue order, both ends included), "125m,1b" or a single name.
  std::vector<std::string> expand(std::string_view spec, const std::string& flag) const;

 private:
  void add_yaml_unguarded(const std::string& text, const std::string& origin, std::vector<std::string>& warnings);
  std::vector<ModelConfig> models_;
};

}  // namespace tpsim
