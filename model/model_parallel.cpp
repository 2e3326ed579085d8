#include "model/model_parallel.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <cmath>
#include <string>

#include "model/pipeline.hpp"
#include "model/framework.hpp"

namespace tpsim {
namespace {

double d(int64_t x) { return static_cast<double>(x); }

}  // namespace

BlockShape rank_shape(const ModelConfig& model, const TrainConfig& cfg, int64_t padded_vocab) {
  const Layout& par = cfg.layout;
  BlockShape s = tensor_parallel_shape(block_shape(model, cfg.micro_batch, cfg.seq_len / par.context, cfg.precision),
                                       par.tensor, par.sequence_parallel, padded_vocab);
  s.lora = cfg.lora;
  s.torch_compile = par.torch_compile;
  s.eager_rope = framework_def(par.framework).conventions.eager_norm_rope;
  s.eager_rms_norm = s.eager_rope && !par.fused_rmsnorm;
  if (s.moe.active()) {
    s.moe.capacity_factor = run_capacity_factor(par, s.moe);
    s.moe.d_expert /= par.expert_tensor_degree();
    s.moe.d_shared /= par.tensor;
    s.ep = par.expert;
    s.expert_tp = par.expert_tensor_degree();
  }
  return s;
}

double moe_dispatch_bytes(const BlockShape& s) {
  return d(moe_routed_rows(s.moe, s.row_tokens())) * d(s.moe.routed_width(s.d_model)) * activation_bytes(s.precision);
}

double routed_hit_probability(const MoeConfig& e, int64_t span) {
  const int64_t k = e.top_k;
  if (span <= 0 || k <= 0) return 0.0;
  if (span >= e.experts) return 1.0;
  // The chance that `draws` items drawn without replacement from `pool` miss `out` of them.
  const auto miss = [](int64_t pool, int64_t out, int64_t draws) {
    double p = 1.0;
    for (int64_t i = 0; i < draws; ++i) {
      if (pool - out - i <= 0) return 0.0;
      p *= d(pool - out - i) / d(pool - i);
    }
    return p;
  };
  const int64_t n = e.groups, g = e.group_top_k;
  if (n <= 1 || g >= n || e.experts % n != 0 || k % g != 0) return 1.0 - miss(e.experts, span, k);
  // A chosen group was chosen for its two best experts, so it takes its share of the token's k, k/g,
  // almost always (at DeepSeek-V3's sizes the test's simulation of the router finds 99% of chosen
  // groups with one), among its experts alike.
  const int64_t size = e.experts / n;
  if (size % span == 0) return d(g) / d(n) * (1.0 - miss(size, span, k / g));
  if (span % size == 0) return 1.0 - miss(n, span / size, g);  // whole groups: hit when one is chosen
  return 1.0 - miss(e.experts, span, k);                       // a span across group edges: as if there were no groups
}

double flex_dispatch_seconds(const CostModel& cost, const BlockShape& s, const CommGroup& g) {
  if (g.ranks <= 1 || !s.moe.active()) return 0.0;
  const DeviceSpec& dev = cost.device();
  const CostParams& p = cost.params();
  const double row = d(s.row_tokens()) * d(s.moe.routed_width(s.d_model)) * activation_bytes(s.precision);
  const int64_t etp = s.expert_tensor_parallel(), ep = std::max<int64_t>(s.ep, 1);
  const int64_t per_slot = s.moe.experts / ep;  // a rank's experts (its etp peers hold the same)
  const int64_t on_node = std::max<int64_t>(g.ranks / g.nodes, 1);
  const double p_rank = routed_hit_probability(s.moe, per_slot);
  const double nvlink = dev.intra_node_bytes_per_s * p.intra_node_link_efficiency;
  if (g.nodes <= 1) return row * p_rank * d(g.ranks - 1) / nvlink + p.intra_node_latency_s;
  const double p_node = routed_hit_probability(s.moe, per_slot * std::max<int64_t>(on_node / etp, 1));
  const double network = d(g.groups_per_node) * d(on_node) * row * p_node * d(g.nodes - 1) /
                         (dev.inter_node_bytes_per_s * p.inter_node_link_efficiency);
  const double forwarded = row * p_rank * d(on_node - 1) * d(g.nodes) / nvlink;
  return std::max(network, forwarded) + p.inter_node_latency_s;
}

double ring_step_seconds(const CostModel& cost, double bytes, const CommGroup& ring) {
  if (ring.ranks <= 1 || bytes <= 0) return 0.0;
  const DeviceSpec& dev = cost.device();
  const CostParams& p = cost.params();
  const double intra = bytes / (dev.intra_node_bytes_per_s * p.intra_node_link_efficiency);
  if (ring.nodes <= 1) return intra + p.intra_node_latency_s;
  const double nic = dev.inter_node_bytes_per_s * p.inter_node_link_efficiency / d(ring.groups_per_node);
  return std::max(intra, bytes / nic) + p.inter_node_latency_s;
}

double stage_hop_seconds(const CostModel& cost, const ModelParallelLayout& l, double bytes) {
  const DeviceSpec& dev = cost.device();
  const CostParams& p = cost.params();
  return l.stage_link_crosses_nodes
             ? bytes / (dev.inter_node_bytes_per_s * p.inter_node_link_efficiency / d(l.stage_link_sharers)) +
                   p.inter_node_latency_s
             : bytes / (dev.intra_node_bytes_per_s * p.intra_node_link_efficiency) + p.intra_node_latency_s;
}

double pipeline_send_seconds(const CostModel& cost, const ModelParallelLayout& l, const Layout& par, double td_bytes) {
  if (l.pp <= 1) return 0.0;
  const bool scatter_gather = par.pipeline_scatter_gather && !par.sequence_parallel;
  const double send = stage_hop_seconds(cost, l, td_bytes / (par.sequence_parallel || scatter_gather ? d(l.tp) : 1.0));
  return send + (scatter_gather ? cost.collective_seconds(CollectiveKind::kAllGather, td_bytes, l.tp_group) : 0.0);
}

double all_to_all_seconds(const CostModel& cost, double bytes, const CommGroup& g) {
  if (g.ranks <= 1 || bytes <= 0) return 0.0;
  const DeviceSpec& dev = cost.device();
  const CostParams& p = cost.params();
  const double n = d(g.ranks), nodes = d(g.nodes);
  const double on_node = n / nodes;  // members per node
  double seconds = (on_node - 1.0) / n * bytes / (dev.intra_node_bytes_per_s * p.intra_node_link_efficiency);
  if (g.nodes <= 1) return seconds + p.intra_node_latency_s;
  // Each node's members send (nodes-1)/nodes of their buffers off the node, groups_per_node groups at once.
  const double off_node = d(g.groups_per_node) * on_node * bytes * (nodes - 1.0) / nodes;
  seconds = std::max(seconds, off_node / (dev.inter_node_bytes_per_s * p.inter_node_link_efficiency));
  return seconds + p.inter_node_latency_s;
}

namespace {

// The layouts parsed so far (Layout::pipeline_layout is an index into it, from 1): a deque, so that
// a layout's reference stays valid as others are added. Bounded, so that no input (a fuzzer's table
// of random layouts) grows it without end.
constexpr size_t kMaxLayouts = 1024, kMaxLayoutEntries = 10000;
std::deque<PipelineLayout>& layouts() {
  static std::deque<PipelineLayout> all;
  return all;
}

// `text` with its repetitions unrolled, as Megatron-Core's parse_str_to_list does: first each
// '(...)*N' (innermost, no nesting), then each 'x*N'. Commas dropped.
std::optional<std::string> unrolled(std::string_view text, std::string& error) {
  std::string s;
  for (char ch : text)
    if (ch != ',' && ch != ' ') s += ch;
  const auto count_at = [&](size_t at, size_t& end) -> std::optional<int64_t> {
    end = at;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
    if (end == at || end - at > 4) return std::nullopt;
    return std::stoll(s.substr(at, end - at));
  };
  for (size_t open = s.find('('); open != std::string::npos; open = s.find('(')) {
    const size_t close = s.find(')', open);
    if (close == std::string::npos || s.find('(', open + 1) < close || close + 1 >= s.size() || s[close + 1] != '*') {
      error = "'(' at " + std::to_string(open) + " is not a group '(...)*N'";
      return std::nullopt;
    }
    size_t end = 0;
    const std::optional<int64_t> times = count_at(close + 2, end);
    if (!times) {
      error = "'*' after ')' needs a count";
      return std::nullopt;
    }
    const size_t width = close - open - 1;
    if (width * static_cast<size_t>(*times) + s.size() > kMaxLayoutEntries) {
      error = "it unrolls to more than " + std::to_string(kMaxLayoutEntries) + " entries";
      return std::nullopt;
    }
    std::string unrolled_group = s.substr(0, open);
    for (int64_t i = 0; i < *times; ++i) unrolled_group.append(s, open + 1, width);
    unrolled_group.append(s, end);
    s = std::move(unrolled_group);
  }
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '*') {
      size_t end = 0;
      const std::optional<int64_t> times = count_at(i + 1, end);
      if (!times || out.empty() || out.back() == '|') {
        error = "'*' at " + std::to_string(i) + " needs a layer before it and a count after it";
        return std::nullopt;
      }
      out.append(static_cast<size_t>(*times - 1), out.back());
      i = end - 1;
    } else {
      out += s[i];
    }
    if (out.size() > kMaxLayoutEntries) {
      error = "it unrolls to more than " + std::to_string(kMaxLayoutEntries) + " entries";
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

std::optional<uint16_t> parse_pipeline_layout(std::string_view text, std::string& error) {
  for (size_t i = 0; i < layouts().size(); ++i)
    if (layouts()[i].text == text) return static_cast<uint16_t>(i + 1);
  const std::optional<std::string> s = unrolled(text, error);
  if (!s) return std::nullopt;
  PipelineLayout l;
  l.text = std::string(text);
  l.decoders.push_back(0), l.mtp.push_back(0);
  int64_t embeddings = 0, losses = 0;
  bool after_mtp = false;
  for (size_t i = 0; i < s->size(); ++i) {
    const char ch = (*s)[i];
    const int64_t chunk = static_cast<int64_t>(l.decoders.size()) - 1;
    const bool first = i == 0 || (*s)[i - 1] == '|', last = i + 1 == s->size() || (*s)[i + 1] == '|';
    switch (ch) {
      case '|': l.decoders.push_back(0), l.mtp.push_back(0); break;
      case 't':
        if (after_mtp) {
          error = "decoder layers (t) must come before the multi-token prediction depths (m)";
          return std::nullopt;
        }
        ++l.decoders.back();
        break;
      case 'm': ++l.mtp.back(), after_mtp = true; break;
      case 'E': ++embeddings, l.embedding_chunk = chunk, l.embedding_first = first; break;
      case 'L': ++losses, l.loss_chunk = chunk, l.loss_last = last; break;
      default: error = std::string("'") + ch + "' is not a layer (E, t, m, L)"; return std::nullopt;
    }
  }
  if (embeddings != 1 || losses != 1) {
    error = "it needs the embedding (E) and the loss (L) exactly once each";
    return std::nullopt;
  }
  if (layouts().size() >= kMaxLayouts) {
    error = "more than " + std::to_string(kMaxLayouts) + " distinct pipeline layouts in one run";
    return std::nullopt;
  }
  layouts().push_back(std::move(l));
  return static_cast<uint16_t>(layouts().size());
}

const PipelineLayout& pipeline_layout(uint16_t id) { return layouts().at(static_cast<size_t>(id) - 1); }

std::string split_layers(int64_t n_layers, const Layout& par, std::vector<int64_t>& layers) {
  const int64_t pp = par.pipeline, vp = par.virtual_stages, chunks = pp * vp;
  const auto n = [](int64_t v) { return std::to_string(v); };
  layers.clear();
  if (par.pipeline_layout != 0) {
    // Megatron-Core's own layout (PipelineParallelLayerLayout.validate_layer_layout's checks, and
    // tpsim's: the embedding in the first chunk, the loss and every MTP depth in the last).
    const PipelineLayout& l = pipeline_layout(par.pipeline_layout);
    const std::string what = "pipeline layout '" + l.text + "'";
    const int64_t count = static_cast<int64_t>(l.decoders.size());
    if (par.first_stage_layers > 0 || par.last_stage_layers > 0 || par.account_for_embedding || par.account_for_loss)
      return what + " with first or last stage layers or the embedding or loss counted: give one of them";
    if (count != chunks)
      return what + " has " + n(count) + " model chunks; pipeline parallel " + n(pp) + " x virtual stages " + n(vp) +
             " is " + n(chunks);
    int64_t decoders = 0, mtp = 0;
    for (int64_t c = 0; c < count; ++c) decoders += l.decoders[static_cast<size_t>(c)];
    for (int64_t c = 0; c < count; ++c) mtp += l.mtp[static_cast<size_t>(c)];
    if (decoders != n_layers) return what + " places " + n(decoders) + " decoder layers of the model's " + n(n_layers);
    if (l.embedding_chunk != 0 || !l.embedding_first) return what + " must begin with the embedding (E)";
    if (l.loss_chunk != count - 1 || !l.loss_last) return what + " must end with the loss (L)";
    if (mtp != par.mtp_layers)
      return what + " places " + n(mtp) + " multi-token prediction depths (m); --mtp-layers is " + n(par.mtp_layers);
    if (mtp > 0 && l.mtp.back() != mtp)
      return what + ": multi-token prediction depths in a chunk other than the loss's are not modelled";
    layers = l.decoders;
    return {};
  }
  if (!par.uneven_pipeline()) {
    if (n_layers % chunks != 0)
      return "pipeline parallel " + n(pp) + " x virtual stages " + n(vp) + " does not divide the " + n(n_layers) +
             " layers evenly (uneven splits: --first-stage-layers, --last-stage-layers, --account-for-embedding, "
             "--account-for-loss)";
    layers.assign(static_cast<size_t>(chunks), n_layers / chunks);
    return {};
  }
  if (pp < 2) return "an uneven pipeline split needs pipeline parallel of at least 2";
  // The embedding and loss, counted, may each fill a chunk of their own.
  const int64_t counted = n_layers + (par.account_for_embedding ? 1 : 0) + (par.account_for_loss ? 1 : 0);
  if (chunks > counted)
    return "pipeline parallel " + n(pp) + " x virtual stages " + n(vp) + " is more model chunks than the " +
           n(n_layers) + " layers" + (counted > n_layers ? " with the embedding or loss counted" : "");
  const int64_t first = par.first_stage_layers, last = par.last_stage_layers;
  const bool fixed = first > 0 || last > 0;
  if (fixed && (par.account_for_embedding || par.account_for_loss))
    return "first or last stage layers cannot be combined with counting the embedding or loss as layers (Megatron-Core "
           "refuses both)";
  layers.assign(static_cast<size_t>(chunks), 0);
  if (fixed) {
    const int64_t between = pp - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);  // stages that split the rest
    const int64_t rest = n_layers - first - last;
    if (rest < 0 || (between == 0 && rest != 0))
      return "first stage layers " + n(first) + " and last stage layers " + n(last) + " do not sum to the " +
             n(n_layers) + " layers with " + n(between) + " stages between them";
    if (first % vp != 0 || last % vp != 0)
      return "virtual stages " + n(vp) + " do not divide the first or last stage's layers (" + n(first) + ", " +
             n(last) + ")";
    if (between > 0 && rest % (between * vp) != 0)
      return "the " + n(rest) + " layers between the first and last stage do not split evenly over " + n(between) +
             " stages x virtual stages " + n(vp);
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t s = c % pp;
      layers[static_cast<size_t>(c)] = s == 0 && first > 0       ? first / vp
                                       : s == pp - 1 && last > 0 ? last / vp
                                                                 : rest / (between * vp);
    }
  } else {
    if (counted % chunks != 0)
      return "the " + n(n_layers) + " layers with the embedding or loss counted as layers (" + n(counted) +
             ") do not split evenly over pipeline parallel " + n(pp) + " x virtual stages " + n(vp);
    layers.assign(static_cast<size_t>(chunks), counted / chunks);
    if (par.account_for_embedding) --layers.front();
    if (par.account_for_loss) --layers.back();
  }
  // A chunk holding the embedding (loss) counted as its one layer builds no transformer layer:
  // Megatron-Core allows that (get_num_layers_to_build asserts at least 0 there); every other chunk
  // needs a layer.
  for (int64_t c = 0; c < chunks; ++c) {
    const bool counted_only = (c == 0 && par.account_for_embedding) || (c == chunks - 1 && par.account_for_loss);
    if (layers[static_cast<size_t>(c)] < (counted_only ? 0 : 1))
      return "the uneven pipeline split leaves model chunk " + n(c) + " (stage " + n(c % pp) + ") with no layers";
  }
  return {};
}

void LinearSeconds::push(const Op& op) {
  if (op.category != OpCategory::kGemm || op.pass != pass_) return;
  const double s = cost_.op_seconds(op);
  switch (op.role) {
    case OpRole::kQkv: qkv += s; break;
    case OpRole::kAttnOut: out += s; break;
    case OpRole::kFfnGate:
    case OpRole::kFfnFc1: gate += s; break;  // fc1: both halves
    case OpRole::kFfnUp: up += s; break;
    case OpRole::kFfnDown: down += s; break;
    default: break;
  }
}

LinearSeconds linear_seconds(const CostModel& cost, void (*build)(const BlockShape&, OpSink&), const BlockShape& s,
                             OpPass pass) {
  LinearSeconds sink(cost, pass);
  build(s, sink);
  return sink;
}

void tensor_parallel_seconds(const CostModel& cost, const BlockShape& shape, const CommGroup& group, bool overlapped,
                             double td_bytes, double& fwd, double& bwd, double& ag, double& rs) {
  ag = cost.collective_seconds(CollectiveKind::kAllGather, td_bytes, group);
  rs = cost.collective_seconds(CollectiveKind::kReduceScatter, td_bytes, group);
  // A gather and a scatter around each sublayer: the mixer's (attention's or Mamba-2's, whose in and
  // out projections carry attention's roles) and the feed-forward's.
  const double mixer = shape.mixer != Mixer::kNone ? 1.0 : 0.0, ffn = shape.no_ffn ? 0.0 : 1.0;
  if (!overlapped) {
    fwd = bwd = (mixer + ffn) * (ag + rs);
    return;
  }
  const LinearSeconds f = linear_seconds(cost, block_forward_ops, shape, OpPass::kForward);
  const LinearSeconds b = linear_seconds(cost, block_backward_ops, shape, OpPass::kDataGrad);
  const auto hidden = [](double comm, double gemm) { return std::max(comm - gemm, 0.0); };
  // Forward: gather -> QKV, out projection -> scatter, gather -> gate/up, down -> scatter.
  fwd = mixer * (hidden(ag, f.qkv) + hidden(rs, f.out)) + ffn * (hidden(ag, f.gate + f.up) + hidden(rs, f.down));
  // Backward: gather -> down's dgrad, gate/up's dgrad -> scatter, gather -> out's dgrad, QKV's -> scatter.
  bwd = ffn * (hidden(ag, b.down) + hidden(rs, b.gate + b.up)) + mixer * (hidden(ag, b.out) + hidden(rs, b.qkv));
}

RingAttention ring_attention(const CostModel& cost, const BlockShape& local, int64_t cp, const CommGroup& ring) {
  RingAttention r;
  r.step_fwd_s = cost.op_seconds(attention_op("attn.flash.fwd", OpKind::kAttentionFwd, local));
  r.step_bwd_s = cost.op_seconds(attention_op("attn.flash.bwd", OpKind::kAttentionBwd, local));
  const double steps = d(cp);
  r.fwd_compute_s = steps * r.step_fwd_s;
  r.bwd_compute_s = steps * r.step_bwd_s;
  if (cp <= 1) return r;
  r.kv_bytes_per_step = 2.0 * d(local.tokens()) * d(local.kv_dim()) * activation_bytes(local.precision);
  r.step_fwd_comm_s = ring_step_seconds(cost, r.kv_bytes_per_step, ring);
  r.step_bwd_comm_s = ring_step_seconds(cost, 2.0 * r.kv_bytes_per_step, ring);
  r.fwd_exposed_s = (steps - 1.0) * std::max(r.step_fwd_comm_s - r.step_fwd_s, 0.0);
  r.bwd_exposed_s = (steps - 1.0) * std::max(r.step_bwd_comm_s - r.step_bwd_s, 0.0);
  return r;
}

}  // namespace tpsim
