// GPT-2-style model on the graph API. Parallelism is only SBP hints on variables, inputs and the
// residual stream (Note [GPT sharding]); everything else is left to SBP inference.

#include "compiler/models/gpt.h"

#include <cmath>
#include <limits>
#include <numeric>

#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/embedding.h"
#include "oneflowlike/ops/layer_norm.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/shape_ops.h"
#include "oneflowlike/ops/softmax.h"
#include "oneflowlike/ops/unary.h"
#include "oneflowlike/ops/where.h"

namespace ofl::compiler {

Placement GptParallel::placement(int stage) const {
  OFL_CHECK_INDEX(stage >= 0 && stage < pp, "[gpt] the pipeline stage must be in [0, pp = ", pp,
                  "). However, got stage = ", stage, ".");
  std::vector<int64_t> ranks(static_cast<size_t>(dp) * static_cast<size_t>(tp));
  std::iota(ranks.begin(), ranks.end(), int64_t{stage} * dp * tp);
  if (dp > 1 && tp > 1) return Placement(device, ranks, Shape{dp, tp});
  return Placement(device, ranks);
}

NdSbp GptParallel::sbp(const Sbp& over_dp, const Sbp& over_tp) const {
  if (dp > 1 && tp > 1) return {over_dp, over_tp};
  if (tp > 1) return {over_tp};
  return {over_dp};  // also the 1-rank case, where any SBP is the whole tensor
}

namespace {

// Note [GPT sharding]: Megatron-LM tensor parallelism as SBP. Over the tp dimension the
// column-parallel weights (c_attn, c_fc) are S(1) and their biases S(0), so their outputs come
// out split on the feature axis and attention runs on whole heads per rank; the row-parallel
// weights (attn.c_proj, mlp.c_proj) are S(0), so their products are partial sums. The residual
// stream (embeddings, the residual adds, layer-norm outputs) is hinted B over tp, which makes
// SBP inference all-reduce the partial sums once per block half, exactly where Megatron does.
// Over dp every weight is B and every activation S(0) (batch), so the gradients come out P and
// are all-reduced before the update.
class GptBuilder {
 public:
  GptBuilder(GraphBuilder& b, const GptConfig& c, const GptParallel& p)
      : b_(b),
        c_(c),
        p_(p),
        head_dim_(c.n_embd / c.n_head),
        micro_batch_(c.batch_size / p.micro_batches) {}

  int build() {
    const int last = p_.pp - 1;
    const NdSbp data = p_.sbp(S(0), B());
    const Shape bt{micro_batch_, c_.block_size};
    enter_stage(0);
    const int tokens = b_.input(GptNames::kTokens, bt, DataType::kInt64, data);
    enter_stage(last);  // the loss reads targets on the last stage
    const int targets = b_.input(GptNames::kTargets, bt, DataType::kInt64, data);
    enter_stage(0);

    // Embeddings: (B, T, C) = wte[tokens] + wpe[0..T).
    const int wte = weight("wte", Shape{c_.vocab_size, c_.n_embd}, replicated());
    const int wpe = weight("wpe", Shape{c_.block_size, c_.n_embd}, replicated());
    const int positions =
        b_.op1("arange", ArangeParams{0, double(c_.block_size), 1, DataType::kInt64}, {},
               "positions", replicated());
    const int tok_emb = b_.op1("embedding", EmbeddingParams{}, {wte, tokens}, "tok_emb", data);
    const int pos_emb =
        b_.op1("embedding", EmbeddingParams{}, {wpe, positions}, "pos_emb", replicated());
    int x = b_.op1("add", NoParams{}, {tok_emb, pos_emb}, "emb", data);

    // The blocks, stage by stage; the residual stream x is the only activation that crosses
    // stages (the compiler inserts its send and, for the backward, the send of its gradient).
    for (int s = 0; s < p_.pp; ++s) {
      enter_stage(s);
      const Range blocks = balanced_range(c_.n_layer, p_.pp, s);
      if (blocks.size() == 0) continue;
      if (s > 0) x = stage_input(x, str_cat("stage", s, ".input"));
      const int mask = causal_mask(s);
      for (int64_t l = blocks.begin; l < blocks.end; ++l) x = block(x, mask, str_cat("h", l));
    }

    enter_stage(last);
    const int h = layer_norm(x, "ln_f");  // (B, T, C)
    const int logits =
        c_.tied_head
            ? b_.op1("matmul", MatmulParams{false, true, 1.0}, {h, wte}, "lm_head")
            : b_.op1("matmul", MatmulParams{},
                     {h, weight("lm_head.weight", Shape{c_.n_embd, c_.vocab_size}, replicated())},
                     "lm_head");  // (B, T, V)
    const int64_t rows = micro_batch_ * c_.block_size;
    const int flat_logits =
        b_.op1("reshape", ReshapeParams{Shape{rows, c_.vocab_size}}, {logits}, "flat_logits");
    const int flat_targets =
        b_.op1("reshape", ReshapeParams{Shape{rows}}, {targets}, "flat_targets");
    const int per_token = b_.op1("sparse_softmax_cross_entropy", NoParams{},
                                 {flat_logits, flat_targets}, "cross_entropy");  // (B * T)
    return b_.op1("reduce_mean", ReduceParams{}, {per_token}, GptNames::kLoss);
  }

 private:
  void enter_stage(int stage) {
    b_.set_placement(p_.placement(stage));
    b_.set_stage(stage);
  }

  // Note [One gradient send per stage boundary]: autograd sums a tensor's gradient
  // contributions where the tensor is produced. A block reads x twice (ln_1 and the residual
  // add), so if x came straight from the previous stage, both contributions would be sent back
  // and added there: twice the bytes. Taking x through one view on this stage (reshape to the
  // same shape: a memcpy, no kernel) gives the boundary tensor one consumer, so its gradients
  // are summed here and one tensor is sent back. (Summing where the contributions are would
  // make this unnecessary; see the report of the pipeline change.)
  int stage_input(int x, const std::string& name) {
    return b_.op1("reshape", ReshapeParams{b_.meta(x).shape}, {x}, name, p_.sbp(S(0), B()));
  }

  NdSbp replicated() const { return p_.sbp(B(), B()); }
  NdSbp over_tp(const Sbp& sbp) const { return p_.sbp(B(), sbp); }

  int weight(const std::string& name, const Shape& shape, const NdSbp& sbp) {
    return b_.variable(name, shape, Initializer{Initializer::Kind::kNormal, 0.0, 0.02, ++seed_},
                       sbp);
  }
  int bias(const std::string& name, int64_t n, const NdSbp& sbp) {
    return b_.variable(name, Shape{n}, Initializer{Initializer::Kind::kZeros, 0, 0, 0}, sbp);
  }

  // (T, T) bool, true above the diagonal (key position j > query position i): the entries
  // masked_fill hides. Built from arange so the caller feeds nothing; each stage builds its own
  // (a few ops, no transfer), named with a "stage<s>." prefix after the first.
  int causal_mask(int stage) {
    const NdSbp r = replicated();
    const int64_t t = c_.block_size;
    const std::string prefix = stage == 0 ? "" : str_cat("stage", stage, ".");
    const int pos = b_.op1("arange", ArangeParams{0, double(t), 1, DataType::kInt64}, {},
                           prefix + "mask.arange", r);
    const int rows = b_.op1("reshape", ReshapeParams{Shape{t, 1}}, {pos}, prefix + "mask.rows", r);
    const int cols = b_.op1("reshape", ReshapeParams{Shape{1, t}}, {pos}, prefix + "mask.cols", r);
    return b_.op1("greater", NoParams{}, {cols, rows}, prefix + "causal_mask", r);
  }

  int layer_norm(int x, const std::string& name) {
    const int w = b_.variable(name + ".weight", Shape{c_.n_embd},
                              Initializer{Initializer::Kind::kOnes, 0, 0, 0}, replicated());
    const int bi = bias(name + ".bias", c_.n_embd, replicated());
    const NdSbp data = p_.sbp(S(0), B());
    return b_.op("layer_norm", LayerNormParams{-1, 1e-5}, {x, w, bi}, name, {data, data, data})[0];
  }

  // x (..., in) @ w (in, out) + bias (out).
  int linear(int x, int64_t in, int64_t out, const std::string& name, const NdSbp& w_sbp,
             const NdSbp& b_sbp) {
    const int w = weight(name + ".weight", Shape{in, out}, w_sbp);
    const int bi = bias(name + ".bias", out, b_sbp);
    const int y = b_.op1("matmul", MatmulParams{}, {x, w}, name + ".matmul");
    return b_.op1("add", NoParams{}, {y, bi}, name + ".add_bias");
  }

  int block(int x, int mask, const std::string& name) {
    const NdSbp data = p_.sbp(S(0), B());
    const int attn = attention(layer_norm(x, name + ".ln_1"), mask, name + ".attn");
    x = b_.op1("add", NoParams{}, {x, attn}, name + ".residual_1", data);
    const int64_t c = c_.n_embd;
    int h = linear(layer_norm(x, name + ".ln_2"), c, 4 * c, name + ".mlp.c_fc", over_tp(S(1)),
                   over_tp(S(0)));
    h = b_.op1("gelu", GeluParams{"tanh"}, {h}, name + ".mlp.gelu");
    h = linear(h, 4 * c, c, name + ".mlp.c_proj", over_tp(S(0)), replicated());
    return b_.op1("add", NoParams{}, {x, h}, name + ".residual_2", data);
  }

  // Causal self-attention of x (B, T, C); see Note [GPT qkv layout] in gpt.h.
  int attention(int x, int mask, const std::string& name) {
    const int64_t bs = micro_batch_, t = c_.block_size, c = c_.n_embd, nh = c_.n_head,
                  d = head_dim_;
    const int qkv = linear(x, c, 3 * c, name + ".c_attn", over_tp(S(1)), over_tp(S(0)));
    const int heads =
        b_.op1("reshape", ReshapeParams{Shape{bs, t, nh, 3 * d}}, {qkv}, name + ".heads");
    const std::vector<int> parts =
        b_.op("split", SplitParams{3, {d, d, d}}, {heads}, name + ".split_qkv");  // (B, T, H, D)
    const TransposeParams to_heads{{0, 2, 1, 3}};
    const int q = b_.op1("transpose", to_heads, {parts[0]}, name + ".q");  // (B, H, T, D)
    const int k = b_.op1("transpose", to_heads, {parts[1]}, name + ".k");
    const int v = b_.op1("transpose", to_heads, {parts[2]}, name + ".v");
    int att = b_.op1("batch_matmul", MatmulParams{false, true, 1.0}, {q, k}, name + ".scores");
    att = b_.op1("scalar_mul", ScalarParams{1.0 / std::sqrt(double(d))}, {att},
                 name + ".scale");  // (B, H, T, T)
    att = b_.op1("masked_fill", MaskedFillParams{-std::numeric_limits<double>::infinity()},
                 {att, mask}, name + ".causal");
    att = b_.op1("softmax", SoftmaxParams{-1}, {att}, name + ".softmax");
    const int y = b_.op1("batch_matmul", MatmulParams{}, {att, v}, name + ".mix");  // (B, H, T, D)
    const int merged = b_.op1("transpose", to_heads, {y}, name + ".merge");         // (B, T, H, D)
    const int flat = b_.op1("reshape", ReshapeParams{Shape{bs, t, c}}, {merged}, name + ".flat");
    return linear(flat, c, c, name + ".c_proj", over_tp(S(0)), replicated());
  }

  GraphBuilder& b_;
  const GptConfig& c_;
  const GptParallel& p_;
  const int64_t head_dim_;
  const int64_t micro_batch_;  // rows of the graph: one micro-batch
  int64_t seed_ = 0;
};

void check_config(const GptConfig& c, const GptParallel& p) {
  OFL_CHECK(p.dp >= 1 && p.tp >= 1 && p.pp >= 1 && p.micro_batches >= 1,
            "[gpt] dp, tp, pp and micro_batches must be at least 1. However, got dp = ", p.dp,
            ", tp = ", p.tp, ", pp = ", p.pp, ", micro_batches = ", p.micro_batches, ".");
  OFL_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_head > 0 &&
                c.n_embd > 0 && c.batch_size > 0,
            "[gpt] vocab_size, block_size, n_head, n_embd and batch_size must be positive and "
            "n_layer non-negative. However, got vocab_size = ",
            c.vocab_size, ", block_size = ", c.block_size, ", n_layer = ", c.n_layer,
            ", n_head = ", c.n_head, ", n_embd = ", c.n_embd, ", batch_size = ", c.batch_size, ".");
  OFL_CHECK(c.n_embd % c.n_head == 0,
            "[gpt] n_embd must be a multiple of n_head (each head gets n_embd / n_head "
            "features). However, got n_embd = ",
            c.n_embd, ", n_head = ", c.n_head, ".");
  OFL_CHECK(c.n_head % p.tp == 0,
            "[gpt] n_head must be a multiple of tp (tensor parallelism gives each rank whole "
            "attention heads). However, got n_head = ",
            c.n_head, ", tp = ", p.tp, ".");
  OFL_CHECK(c.batch_size % (int64_t{p.micro_batches} * p.dp) == 0,
            "[gpt] batch_size must be a multiple of micro_batches * dp (every micro-batch has the "
            "same number of sequences, and every data-parallel rank the same share of it). "
            "However, got batch_size = ",
            c.batch_size, ", micro_batches = ", p.micro_batches, ", dp = ", p.dp, ".");
  OFL_CHECK(p.pp == 1 || c.n_layer >= p.pp,
            "[gpt] with pipeline stages n_layer must be at least pp (every stage gets at least "
            "one block). However, got n_layer = ",
            c.n_layer, ", pp = ", p.pp, ".");
}

}  // namespace

int build_gpt(GraphBuilder& b, const GptConfig& config, const GptParallel& parallel) {
  check_config(config, parallel);
  b.train().gradient_accumulation_steps = parallel.micro_batches;
  return GptBuilder(b, config, parallel).build();
}

Graph gpt_training_graph(const GptConfig& config, const GptParallel& parallel) {
  GraphBuilder b("gpt");
  const int loss = build_gpt(b, config, parallel);
  b.fetch(loss);
  b.set_loss(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
  b.train().optimizer.weight_decay = 0.1;
  return std::move(b.graph());
}

}  // namespace ofl::compiler
