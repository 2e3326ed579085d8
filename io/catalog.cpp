#include "io/catalog.hpp"

#include <algorithm>
#include <set>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/yaml_util.hpp"

namespace tpsim {
namespace {

// llm-foundry `model:` keys that do not change the cost of a step (or that the simulator fixes:
// MPT's flash attention, tied embeddings) and are accepted without a warning.
const std::set<std::string> kIgnoredKeys = {"name", "init_device", "max_seq_len", "attn_config", "ffn_config",
                                            "norm_type", "emb_pdrop", "resid_pdrop", "init_config",
                                            "fc_type", "logit_scale", "tie_word_embeddings"};

ModelConfig parse_model(const std::string& name, const YAML::Node& block, const std::string& origin,
                        std::vector<std::string>& warnings) {
  const std::string at = yaml::where(origin, block);
  if (!block.IsMap()) throw Error(at + ": model '" + name + "' must be a map of llm-foundry model keys");
  ModelConfig m;
  m.name = name;
  m.vocab_size = 50368;  // MPT's default vocabulary (the GPT-NeoX-20B tokenizer, padded)
  std::set<std::string> seen;
  for (const auto& kv : block) {
    const std::string key = yaml::key(kv.first, origin);
    const YAML::Node& v = kv.second;
    if (!seen.insert(key).second) throw Error(yaml::where(origin, v) + ": model '" + name + "': duplicate key " + key);
    const std::string label = "model '" + name + "' " + key;
    if (key == "d_model") m.d_model = yaml::as_int(v, origin, label);
    else if (key == "n_heads") m.n_heads = yaml::as_int(v, origin, label);
    else if (key == "n_layers") m.n_layers = yaml::as_int(v, origin, label);
    else if (key == "expansion_ratio") m.expansion_ratio = yaml::as_double(v, origin, label);
    else if (key == "vocab_size") m.vocab_size = yaml::as_int(v, origin, label);
    else if (key == "learned_pos_emb") m.learned_pos_emb = yaml::as_bool(v, origin, label);
    else if (key == "no_bias") m.no_bias = yaml::as_bool(v, origin, label);
    else if (key == "ffn_config" && v.IsMap() && v["expansion_ratio"])
      m.expansion_ratio = yaml::as_double(v["expansion_ratio"], origin, label + ".expansion_ratio");
    else if (!kIgnoredKeys.count(key))
      warnings.push_back(one_line(yaml::where(origin, v) + ": model '" + name + "': unknown key '" + key + "' ignored"));
  }
  for (const char* required : {"d_model", "n_heads", "n_layers"})
    if (!seen.count(required)) throw Error(at + ": model '" + name + "' is missing the required key " + required);
  if (std::string why = check_architecture(m); !why.empty()) throw Error(at + ": model '" + name + "': " + why);
  return m;
}

}  // namespace

ModelCatalog ModelCatalog::load_default() {
  ModelCatalog c;
  std::vector<std::string> warnings;
  c.add_file(data_dir() / "models" / "mpt.yaml", warnings);
  return c;
}

void ModelCatalog::add_file(const std::filesystem::path& path, std::vector<std::string>& warnings) {
  add_yaml(read_text_file(path, "models file"), path.string(), warnings);
}

void ModelCatalog::add_yaml(const std::string& text, const std::string& origin, std::vector<std::string>& warnings) {
  yaml::guard(origin, [&] { add_yaml_unguarded(text, origin, warnings); });
}

void ModelCatalog::add_yaml_unguarded(const std::string& text, const std::string& origin, std::vector<std::string>& warnings) {
  const YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap() || root.size() == 0)
    throw Error(origin + ": a models file must be a map from model names to llm-foundry model blocks");
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) throw Error(yaml::where(origin, kv.first) + ": model names must be strings");
    const std::string name = yaml::key(kv.first, origin);
    if (name.empty() || name.find_first_of(" ,.\t") != std::string::npos)
      throw Error(yaml::where(origin, kv.first) + ": model name '" + name + "' may not be empty or contain spaces, commas or dots");
    ModelConfig m = parse_model(name, kv.second, origin, warnings);
    auto it = std::find_if(models_.begin(), models_.end(), [&](const ModelConfig& x) { return x.name == name; });
    if (it != models_.end()) *it = m;
    else models_.push_back(m);
  }
}

const ModelConfig* ModelCatalog::find(std::string_view name) const {
  for (const auto& m : models_)
    if (m.name == name) return &m;
  return nullptr;
}

const ModelConfig& ModelCatalog::get(std::string_view name) const {
  if (const ModelConfig* m = find(name)) return *m;
  std::string known;
  for (const auto& m : models_) known += (known.empty() ? "" : ", ") + m.name;
  throw Error("unknown model '" + std::string(name) + "' (known: " + known + "; add others with --models FILE)");
}

std::vector<std::string> ModelCatalog::expand(std::string_view spec, const std::string& flag) const {
  if (spec.empty()) throw Error(flag + ": empty model list");
  const size_t dots = spec.find("..");
  std::vector<std::string> out;
  if (dots != std::string_view::npos) {
    const std::string a(spec.substr(0, dots)), b(spec.substr(dots + 2));
    const auto index = [&](const std::string& n) {
      for (size_t i = 0; i < models_.size(); ++i)
        if (models_[i].name == n) return i;
      get(n);  // throws with the list of known models
      return size_t{0};
    };
    if (a.empty() || b.empty()) throw Error(flag + " '" + std::string(spec) + "': a range needs both ends, as in 125m..70b");
    const size_t i = index(a), j = index(b);
    if (i > j) throw Error(flag + " '" + std::string(spec) + "': reversed range (" + b + " comes before " + a + " in the catalogue)");
    for (size_t k = i; k <= j; ++k) out.push_back(models_[k].name);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string item(spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (item.empty()) throw Error(flag + " '" + std::string(spec) + "': empty item in the list");
    get(item);
    out.push_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tpsim
