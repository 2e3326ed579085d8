// The architecture of a decoder-only transformer (MPT, Llama, Mistral, Qwen, Mixtral, DBRX, GPT-2,
// ...) as llm-foundry's `model:` block or a Hugging Face config.json describes it, and its exact
// parameter counts.
//
// One block: norm -> attention (Q, K, V projections, causal attention over n_heads query heads
// and n_kv_heads key/value heads of head_dim each, out projection) -> residual -> norm ->
// feed-forward (dense MLP or GLU, or a mixture of experts) -> residual. Before the blocks the token
// embedding (and learned positions); after them a final norm and the output projection, tied to the
// token embedding or not.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpsim {

enum class NormKind : uint8_t { kLayerNorm, kRmsNorm };
// kMlp: down(act(up(x))), two matrices. kGlu: down(act(gate(x)) * up(x)), three matrices
// (SwiGLU with SiLU, GeGLU with GELU).
enum class FfnKind : uint8_t { kMlp, kGlu };
// kRelu2: squared ReLU, relu(x)^2 (Nemotron-H's relu2), the same bytes as ReLU (one elementwise
// kernel each way; the backends run ReLU's for it).
enum class Activation : uint8_t { kGelu, kSilu, kRelu, kRelu2 };
// Learned: a table of positions added to the token embedding. ALiBi and RoPE act inside the
// attention and have no parameters; kNone: no positional encoding at all.
enum class PositionKind : uint8_t { kLearned, kAlibi, kRope, kNone };
// RMSNorm on the queries and keys before the attention: kPerHead, one weight of head_dim shared by
// every head (Qwen3, Qwen3-MoE); kWhole, one weight over all of Q (q_dim) and one over all of K
// (kv_dim) (OLMo 2); kPerHeadNoWeight, per head without a weight (Llama 4's L2Norm: x * rsqrt(mean(x^2)
// + eps), no parameters). Elementwise; its parameters count.
enum class QkNorm : uint8_t { kNone, kPerHead, kWhole, kPerHeadNoWeight };

std::string_view to_string(NormKind n);
std::string_view to_string(FfnKind f);
std::string_view to_string(Activation a);
std::string_view to_string(PositionKind p);

// A mixture-of-experts feed-forward in every block (Mixtral, DBRX, Qwen-MoE, llm-foundry's
// MegaBlocks mb_moe / mb_dmoe and torch_dmoe). Each token is routed by a router (a d_model x
// experts GEMM, softmax, top-k) to top_k of the routed experts, each an FFN of the model's FfnKind
// and activation with hidden width d_expert; shared experts (Qwen-MoE, DeepSeek) see every token.
struct MoeConfig {
  int64_t experts = 0;         // routed experts; 0: the block has a dense feed-forward
  int64_t top_k = 0;           // routed experts per token
  int64_t d_expert = 0;        // hidden width of each routed expert
  int64_t shared_experts = 0;  // experts every token passes through
  int64_t d_shared = 0;        // hidden width of each shared expert
  bool shared_gate = false;    // Qwen2-MoE: a sigmoid gate (a d_model x 1 weight) on the shared experts
  // Tokens each expert takes relative to an even share (top_k * tokens / experts); tokens beyond it
  // are dropped and shorter groups padded. 0: dropless (MegaBlocks dMoE, Mixtral, DBRX).
  double capacity_factor = 0;
  bool output_bias = false;  // MegaBlocks: one d_model bias after the experts (MPT without no_bias)
  // A bias per routed expert on the router's scores (DeepSeek-V3's e_score_correction_bias, which
  // its auxiliary-loss-free balancing adjusts): `experts` parameters more, the same ops.
  bool router_bias = false;
  // Biases on every routed expert's linears (GPT-OSS's gate_up_proj_bias and down_proj_bias): per
  // expert 2 x d_expert (GLU) or d_expert, and d_model.
  bool expert_bias = false;
  // Latent experts (Nemotron 3 Super and Ultra's LatentMoE: fc1_latent_proj, fc2_latent_proj): each
  // token projected from d_model down to `latent` before the dispatch and back up after the combine
  // (two d_model x latent linears, no biases); the routed experts work at the latent width. 0: the
  // routed experts work at d_model. The router and the shared experts see the token at d_model.
  int64_t latent = 0;
  // Group-limited routing (DeepSeek-V3's n_group and topk_group; Megatron-Core's
  // --moe-router-num-groups and --moe-router-group-topk): the experts in `groups` equal consecutive
  // groups, each token choosing `group_top_k` groups first and its top_k experts among theirs. It
  // changes no op, only which ranks and NVLink domains a token reaches (routed_hit_probability).
  // 0: every expert open to every token.
  int64_t groups = 0, group_top_k = 0;

  bool active() const { return experts > 0; }
  int64_t routed_width(int64_t d_model) const { return latent > 0 ? latent : d_model; }
};

// Multi-head latent attention (DeepSeek-AI, "DeepSeek-V2", 2024, Sec. 2.1; DeepSeek-V3, Kimi-K2),
// in its training form: the hidden state projected down to a compressed query (q_lora_rank, then
// an RMSNorm) and a compressed key/value (kv_lora_rank, then an RMSNorm) plus one RoPE key part
// shared by every head (qk_rope_head_dim); the compressed parts projected up per head to the
// query's and key's unrotated parts (qk_nope_head_dim) and RoPE parts, and to the value
// (v_head_dim); attention over heads of nope + rope for Q and K and v_head_dim for V; the out
// projection from n_heads * v_head_dim.
struct MlaConfig {
  int64_t q_lora_rank = 0;   // 0: the query projected from the hidden state directly (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0;  // 0: not latent attention
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;

  bool active() const { return kv_lora_rank > 0; }
  bool operator==(const MlaConfig&) const = default;
};

// What mixes a layer's tokens: attention, a Mamba-2 state-space mixer (Mamba2Config), a Gated
// DeltaNet (GdnConfig), or nothing (a layer of a feed-forward alone: Nemotron-H's '-' and 'E' layers).
enum class Mixer : uint8_t { kAttention, kMamba2, kNone, kGatedDeltaNet };
std::string_view to_string(Mixer m);

// A Mamba-2 mixer (Dao and Gu, "Transformers are SSMs", 2024, Sec. 7; mamba_ssm's Mamba2, Megatron-Core's
// MambaMixer, Hugging Face's NemotronHMamba2Mixer): an in projection d_model -> [z, x, B, C, dt]
// (d_inner, d_inner, groups x d_state twice, heads), a depthwise causal convolution of conv_kernel
// taps over x, B and C with SiLU, the chunked state-space scan (SSD) over heads of head_dim with a
// d_state state per head, in chunks of `chunk` tokens, B and C shared by the heads of a group, a
// skip D and a step dt_bias and decay A_log per head; the output gated by silu(z) and RMS-normed per
// group (a weight of d_inner), then an out projection d_inner -> d_model. No biases on the
// projections; the convolution's bias with conv_bias.
struct Mamba2Config {
  int64_t heads = 0, head_dim = 0, d_state = 0, groups = 0, conv_kernel = 0, chunk = 0;
  bool conv_bias = true;

  bool active() const { return heads > 0; }
  int64_t d_inner() const { return heads * head_dim; }
  int64_t conv_channels() const { return d_inner() + 2 * groups * d_state; }         // x, B and C
  int64_t in_width() const { return 2 * d_inner() + 2 * groups * d_state + heads; }  // z, x, B, C, dt
  bool operator==(const Mamba2Config&) const = default;
};

// A Gated DeltaNet mixer (Yang, Kautz and Hatamizadeh, "Gated Delta Networks", 2024; Qwen3-Next's
// Qwen3NextGatedDeltaNet, Megatron-Core's gated_delta_net): an in projection d_model -> [q, k, v, z]
// (key_heads x key_head_dim for q and k, value_heads x value_head_dim for v and the gate z) and
// [b, a] (a write strength and a decay per value head), a depthwise causal convolution of
// conv_kernel taps over q, k and v with SiLU, q and k L2-normed in the kernel, the chunked gated
// delta rule (a key_head_dim x value_head_dim state per value head, chunks of `chunk` tokens; q and k
// shared by value_heads / key_heads value heads), the output RMS-normed per value head and gated by
// silu(z), an out projection value_heads x value_head_dim -> d_model. No biases.
struct GdnConfig {
  int64_t key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0, conv_kernel = 0, chunk = 0;

  bool active() const { return value_heads > 0; }
  int64_t key_dim() const { return key_heads * key_head_dim; }
  int64_t value_dim() const { return value_heads * value_head_dim; }
  int64_t in_width() const { return 2 * key_dim() + 2 * value_dim() + 2 * value_heads; }  // q, k, v, z, b, a
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }                   // q, k, v
  bool operator==(const GdnConfig&) const = default;
};

// How one layer departs from the model's block (ModelConfig's fields): the per-layer patterns of
// Hugging Face's layer_types, Qwen-MoE's decoder_sparse_step and mlp_only_layers, Qwen2's
// max_window_layers, Llama 4's no_rope_layers and interleave_moe_layer_step (ModelConfig::layers).
struct LayerKind {
  bool sliding = false;    // attends within ModelConfig::sliding_window keys, else the whole causal prefix
  bool dense_ffn = false;  // a dense feed-forward of d_ffn() where the model's other layers have experts
  bool chunked = false;    // attends within its chunk of ModelConfig::attention_chunk tokens (Llama 4)
  // No RoPE where the model's other layers rotate q and k (Llama 4's NoPE layers), and none of what
  // only the rotated layers run: a kPerHeadNoWeight QK-norm.
  bool nope = false;
  Mixer mixer = Mixer::kAttention;  // Nemotron-H's hybrid_override_pattern: 'M' Mamba-2, '-' and 'E' none
  bool no_ffn = false;              // no feed-forward ('M' and '*' layers of Nemotron-H)

  bool operator==(const LayerKind&) const = default;
};

struct ModelConfig {
  std::string name;
  int64_t d_model = 0;
  int64_t n_heads = 0;  // query heads
  int64_t n_layers = 0;
  double expansion_ratio = 4.0;  // dense FFN width = expansion_ratio * d_model, unless ffn_hidden is set
  int64_t vocab_size = 0;
  int64_t n_kv_heads = 0;  // key/value heads (grouped-query, multi-query); 0: n_heads
  int64_t head_dim = 0;    // 0: d_model / n_heads
  int64_t ffn_hidden = 0;  // dense FFN width when given explicitly (ffn_hidden_size, intermediate_size)
  PositionKind positions = PositionKind::kLearned;
  int64_t max_positions =
      0;  // rows of a learned position table; 0: the run's sequence length (MPT sizes it by max_seq_len)
  NormKind norm = NormKind::kLayerNorm;
  bool norm_bias = true;    // LayerNorm's bias (RMSNorm has none)
  bool qkv_bias = true;     // biases of the Q, K and V projections
  bool linear_bias = true;  // biases of the out projection and the feed-forward's linears
  FfnKind ffn = FfnKind::kMlp;
  Activation activation = Activation::kGelu;
  bool tie_embeddings = true;  // output projection shares the token embedding's weight
  int64_t sliding_window = 0;  // keys each query attends to at most (Mistral); 0: the whole causal prefix
  // Chunked attention (Llama 4's attention_chunk_size): the sequence cut into chunks of this many
  // tokens, each query attending causally within its own chunk only: attention over independent
  // sequences of the chunk's length. 0: the whole causal prefix.
  int64_t attention_chunk = 0;
  QkNorm qk_norm = QkNorm::kNone;
  MoeConfig moe;
  // How the attention core is computed: fused flash attention (causal blocks skipped, nothing of
  // seq^2 kept), or unfused with the scores materialised (Megatron-LM's core attention without
  // --use-flash-attn: batched GEMM, fused causal softmax, dropout, batched GEMM), which attention
  // dropout then applies to. Used by the megatron path (ops.hpp unfused attention).
  bool unfused_attention = false;
  // With unfused_attention: the core as llm-foundry's attn_impl: torch runs it
  // (scaled_multihead_dot_product_attention: a batched matmul, the scale, the causal masked_fill,
  // ALiBi's bias added when positions are ALiBi, softmax in fp32 under autocast, the cast back,
  // a batched matmul; each a PyTorch kernel) instead of Megatron's fused causal softmax.
  bool torch_attention = false;
  double attention_dropout = 0;  // probability, unfused attention only
  // RMSNorms on the attention's and the feed-forward's outputs before each residual add, beside the
  // norms before them (Gemma 2 and 3: post_attention_layernorm, post_feedforward_layernorm): four
  // norms per block.
  bool post_norms = false;
  // A learned logit per query head that every softmax row includes (GPT-OSS's attention sinks):
  // n_heads parameters per layer; the attention kernel reads them, no op of its own.
  bool attention_sinks = false;
  // Each layer's token mixer and whether it has a feed-forward (a Nemotron-H layer holds one of a
  // Mamba-2 mixer, attention, an MLP or a mixture of experts, each behind its own norm and residual);
  // the Mamba-2 mixer's sizes. With layers, mixer and no_ffn are those of the uniform model only: the
  // kinds say each layer's.
  Mixer mixer = Mixer::kAttention;
  bool no_ffn = false;
  Mamba2Config mamba;
  GdnConfig gdn;  // the Gated DeltaNet mixer's sizes
  // Attention whose output is gated per element by sigmoid of a second query-sized projection
  // (Qwen3-Next's gated attention: q_proj twice the query width, o_proj(attn * sigmoid(gate))).
  bool attention_output_gate = false;
  // Latent attention (MlaConfig); with it, head_dim is the query's and key's head (nope + rope),
  // n_kv_heads n_heads (each head its own key and value after the up projection).
  MlaConfig mla;
  // One kind per layer, in model order, when the layers differ; empty: every layer is the block the
  // fields above describe (sliding when sliding_window > 0). With layers, sliding_window is the
  // window of the layers whose kind slides, attention_chunk the chunk of those whose kind is chunked,
  // positions those of the layers whose kind is not nope, and moe the experts of those whose kind is
  // not dense.
  std::vector<LayerKind> layers;
  // The layers of one multi-token prediction depth where the model names them (Nemotron-H's
  // mtp_hybrid_override_pattern: "*E", attention then experts), each a kind of `layers`; empty: a
  // depth is one layer of the last layer's kind (Megatron-Core's GPT path). The model costed holds
  // no depth; a run trains `Layout::mtp_layers` of them.
  std::vector<LayerKind> mtp_kinds;

  int64_t d_head() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t q_dim() const { return n_heads * d_head(); }                         // width of Q and of the attention output
  int64_t kv_dim() const { return kv_heads() * d_head(); }                     // width of K and of V
  int64_t v_head() const { return mla.active() ? mla.v_head_dim : d_head(); }  // a value head
  int64_t o_dim() const { return n_heads * v_head(); }                         // width of the attention output
  int64_t d_ffn() const;                                                       // dense FFN width
  bool learned_positions() const { return positions == PositionKind::kLearned; }
  bool uniform() const { return layers.empty(); }  // every layer the block the fields describe
  // The MPT defaults the seed tables were measured with: MHA, LayerNorm with biases everywhere,
  // GELU MLP, learned positions, tied embeddings, full causal attention, dense.
  bool is_mpt_default() const;
};

// A model's layers as groups of equal layers: each group one kind, as a uniform model of that
// kind's block (layer_model), with how many layers it has; and the runs of consecutive layers of
// one group, in model order. Costs and memory are summed per group; a schedule steps through the
// runs (and skips the steady state within each). A uniform model: one group, one run.
struct LayerGroup {
  ModelConfig model;   // the block of this kind, layers empty
  int64_t layers = 0;  // how many of the model's layers are of it
};
struct LayerRun {
  int group = 0;
  int64_t layers = 0;
};
struct LayerPattern {
  std::vector<LayerGroup> groups;  // in order of first appearance
  std::vector<LayerRun> runs;      // in model order
  // Layers of each group among layers [first, first + count) (a pipeline chunk's), by group.
  std::vector<int64_t> count_in(int64_t first, int64_t count) const;
};
LayerPattern layer_pattern(const ModelConfig& m);

// `m`'s block as layer kind `k` makes it: a uniform model (layers empty) whose sliding window, chunk,
// positions and experts are the kind's.
ModelConfig layer_model(const ModelConfig& m, const LayerKind& k);

// Sets m's layers to `kinds` (one per layer), or, when they are all of one kind and m names no
// multi-token prediction kinds, m's fields to that kind's block with no per-layer kinds (so that a
// uniform model has one representation).
void set_layer_kinds(ModelConfig& m, const std::vector<LayerKind>& kinds);

// Throws std::logic_error naming `what` when m's layers differ: what costs one block must be given
// a group's model (layer_pattern), never a per-layer model.
void require_uniform(const ModelConfig& m, const char* what);

// The layers whose mixer is attention (all of a transformer's; a hybrid's '*' layers).
int64_t attention_layer_count(const ModelConfig& m);

// Empty when the architecture can be modelled, else the reason (heads that do not divide d_model,
// query heads not a multiple of the key/value heads, ...).
std::string check_architecture(const ModelConfig& m);

// The GEMM widths of the model that are not a multiple of 8 (in bf16 and fp16 a row of such a
// width is not 16-byte aligned, and cuBLAS runs the GEMM on slower kernels than the cost model's,
// which does not cost the difference: docs/model.md "Known simplifications"), each named as a note
// names it ("output layer", "hidden size", ...). `vocab_padded`: the framework pads the vocabulary
// (Megatron), so the output layer is aligned whatever the model's vocabulary.
std::vector<std::pair<std::string, int64_t>> unaligned_gemm_widths(const ModelConfig& m, bool vocab_padded);

// Parameters of one transformer block of a uniform model (ModelConfig::uniform; throws
// std::logic_error otherwise: a per-layer model's blocks are its layer_pattern's groups), every
// expert included: attention (Q: d x q_dim, K and V:
// d x kv_dim each, out: q_dim x d, with their biases), the two norms, and the feed-forward (dense:
// 2 or 3 matrices of d x d_ffn and their biases; mixture of experts: the router (d x experts, no
// bias), each routed and shared expert's matrices, the shared gate and the output bias).
// MPT defaults (f = 4d, biases): 12d^2 + 13d.
int64_t layer_parameter_count(const ModelConfig& m);

// The same with only top_k of the routed experts counted (llm-foundry's mpt_get_active_params:
// each expert's weights times top_k / experts). Dense blocks: layer_parameter_count.
int64_t layer_active_parameter_count(const ModelConfig& m);

// Parameters outside the blocks: the token embedding (V*d), the output projection when untied (V*d),
// learned positions (max_positions or seq_len rows of d) and the final norm.
int64_t embedding_parameter_count(const ModelConfig& m, int64_t seq_len);

// Parameters of all the blocks, and of them those active (layer_active_parameter_count), summed
// over the layers' kinds.
int64_t blocks_parameter_count(const ModelConfig& m);
int64_t blocks_active_parameter_count(const ModelConfig& m);

// Total parameters (the NumParams column): llm-foundry's mpt_get_total_params for MPT models, the
// sum of parameter sizes for Hugging Face ones. MPT defaults: L*(12d^2 + 13d) + d*(V + S + 2).
int64_t parameter_count(const ModelConfig& m, int64_t seq_len);

// The parameters llm-foundry's flops_per_batch multiplies by 6 per token (mpt_get_active_params):
// routed experts counted top_k / experts, and the token embedding left out when untied (a lookup
// table, not a matmul). Dense models with tied embeddings: parameter_count.
int64_t active_parameter_count(const ModelConfig& m, int64_t seq_len);

// The model of a vTrain row: Megatron's GPT as vTrain's runs built it (VIA-Research/vTrain at
// f8dda84, src/predictor.py's parameter list and src/model/gpt_model.py): learned positions, as
// many as the sequence length (vTrain's `max_length`; Megatron-LM's examples/pretrain_gpt.sh sets
// --max-position-embeddings to --seq-length, 1024), LayerNorm with biases, a GELU MLP of 4h with
// biases, embeddings tied to the output layer, GPT-2's vocabulary of 50257 (Megatron pads it to a
// multiple of 128 x TP, 50304 at TP 1: 0.1% more logit work, not modelled here). Named
// gpt-h<hidden>-a<heads>-l<layers>.
ModelConfig vtrain_gpt_model(int64_t hidden, int64_t heads, int64_t layers);

// Megatron-LM's core attention, its attention before --use-flash-attn (Megatron-LM's
// megatron/model/transformer.py CoreAttention; Megatron-DeepSpeed's default): the scores
// materialised, its fused causal softmax, and the dropout of its default --attention-dropout 0.1.
void use_megatron_core_attention(ModelConfig& m);

}  // namespace tpsim
