#include "calibrate/step_ops.hpp"

#include "io/error.hpp"

namespace tpsim {

std::string_view to_string(StepPart p) {
  switch (p) {
    case StepPart::kEmbeddingForward: return "embedding forward";
    case StepPart::kBlockForward: return "block forward";
    case StepPart::kHead: return "head and loss";
    case StepPart::kBlockRecompute: return "block recompute";
    case StepPart::kBlockBackward: return "block backward";
    case StepPart::kEmbeddingBackward: return "embedding backward";
    case StepPart::kOptimizer: return "optimizer";
  }
  return "?";
}

bool is_block_part(StepPart p) {
  return p == StepPart::kBlockForward || p == StepPart::kBlockRecompute || p == StepPart::kBlockBackward;
}

std::vector<StepOp> training_step_ops(const ModelConfig& model, const StepOptions& o) {
  if (std::string why = check_architecture(model); !why.empty()) throw Error("model " + model.name + ": " + why);
  const int64_t layers = o.layers == 0 ? model.n_layers : o.layers;
  if (layers < 1 || layers > model.n_layers)
    throw Error("--layers " + std::to_string(layers) + ": model " + model.name + " has " +
                std::to_string(model.n_layers) + " blocks (1.." + std::to_string(model.n_layers) + ")");
  if (o.micro_batch < 1) throw Error("--micro-batch " + std::to_string(o.micro_batch) + " must be at least 1");
  if (o.seq_len < 1 || o.seq_len > kMaxSeqLen)
    throw Error("--seq " + std::to_string(o.seq_len) + " is outside 1.." + std::to_string(kMaxSeqLen));

  // Each layer's block is its group's (layer_pattern); the embedding and head are every group's alike.
  const LayerPattern pattern = layer_pattern(model);
  std::vector<BlockShape> shapes;
  for (const LayerGroup& g : pattern.groups)
    shapes.push_back(block_shape(g.model, o.micro_batch, o.seq_len, o.precision));
  std::vector<size_t> group_of;
  for (const LayerRun& r : pattern.runs)
    group_of.insert(group_of.end(), static_cast<size_t>(r.layers), static_cast<size_t>(r.group));
  std::vector<StepOp> out;
  const auto add = [&](const auto& build, StepPart part, int64_t layer) {
    OpVector v;
    build(shapes[layer < 0 ? 0 : group_of[static_cast<size_t>(layer)]], v);
    for (const Op& op : v.ops) out.push_back({op, part, layer});
  };
  add(embedding_forward_ops, StepPart::kEmbeddingForward, -1);
  for (int64_t i = 0; i < layers; ++i) add(block_forward_ops, StepPart::kBlockForward, i);
  add(head_forward_ops, StepPart::kHead, -1);
  add(head_backward_ops, StepPart::kHead, -1);
  for (int64_t i = layers - 1; i >= 0; --i) {
    if (o.checkpointing == Checkpointing::kFull) add(block_forward_ops, StepPart::kBlockRecompute, i);
    if (o.checkpointing == Checkpointing::kSelective) add(attention_recompute_ops, StepPart::kBlockRecompute, i);
    add(block_backward_ops, StepPart::kBlockBackward, i);
  }
  add(embedding_backward_ops, StepPart::kEmbeddingBackward, -1);
  // The whole model's parameters: a device that trains it alone updates all of them, whatever
  // --layers ran.
  OpVector optimizer;
  optimizer_ops(static_cast<double>(parameter_count(model, o.seq_len)), optimizer);
  for (const Op& op : optimizer.ops) out.push_back({op, StepPart::kOptimizer, -1});
  return out;
}

}  // namespace tpsim
