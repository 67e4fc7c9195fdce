// The block-vs-chain exactness probe: see exactness.h and docs/kernels/exactness.md.
//
// "Block" is one call over T rows (speculative verification: k drafted tokens in one
// forward); "chain" is T calls over one row each (classic decode). A row is identical when
// its bytes are. The chain's row t never depends on T, so it is computed once per row and
// every block T = 1..t_max is compared against the same chain rows.
#include "exactness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "mlx/mlx.h"

namespace mx = mlx::core;

namespace exactness {
namespace {

using Bytes = std::vector<uint8_t>;
using Rows = std::vector<Bytes>;

mx::Dtype dtype_of(const std::string& name) {
  if (name == "bf16") return mx::bfloat16;
  if (name == "f16") return mx::float16;
  if (name == "f32") return mx::float32;
  throw std::invalid_argument("exactness: dtype must be bf16, f16 or f32, got '" + name + "'");
}

const std::vector<std::string>& float_types() {
  static const std::vector<std::string> t = {"bf16", "f16", "f32"};
  return t;
}

// The bytes of each of `rows` rows of `a` (its leading axes flattened into rows).
Rows row_bytes(mx::array a, int rows) {
  a = mx::contiguous(mx::reshape(a, {rows, -1}));
  mx::eval(a);
  size_t width = static_cast<size_t>(a.shape(1)) * a.itemsize();
  const uint8_t* p = a.data<uint8_t>();
  Rows out(rows);
  for (int r = 0; r < rows; ++r) {
    out[r].assign(p + r * width, p + (r + 1) * width);
  }
  return out;
}

// A 64-bit digest of an array's bytes in row-major order, as 16 hex digits: a run's fingerprint
// of one tensor, compared with another process's (the same bytes give the same digest; one
// flipped bit, another). FNV-1a's fold taken over 64-bit words (the last one zero-padded, the
// byte count folded in last), each word first mixed by MurmurHash3's finalizer (fmix64) so that a
// difference in any of its bits reaches every bit of the fold: about five times faster than FNV-1a
// byte by byte on the prompt's taps (gigabytes at prompt 1024); in a plain word-wise FNV fold
// the top bits of two neighbouring words flipped together cancel exactly (a top-bit difference
// stays the top bit through the multiply), which the mixing rules out but for a 2^-64 chance.
std::string digest_bytes(const uint8_t* p, size_t n) {
  auto fmix = [](uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
  };
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<size_t>(8, n - i));
    h = (h ^ fmix(w)) * 0x100000001b3ull;
  }
  h = (h ^ fmix(n)) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// An array's digest; flip: of its bytes with the lowest bit of the first flipped (a control).
std::string digest(const mx::array& a, bool flip = false) {
  auto c = mx::contiguous(mx::flatten(a));
  mx::eval(c);
  const uint8_t* p = c.data<uint8_t>();
  if (!flip || c.nbytes() == 0) return digest_bytes(p, c.nbytes());
  std::vector<uint8_t> copy(p, p + c.nbytes());
  copy[0] ^= 1;
  return digest_bytes(copy.data(), copy.size());
}

// Rows of an attention-layout array [1, H, L, D] as [L, H*D].
mx::array heads_to_rows(const mx::array& a) {
  int L = a.shape(2);
  return mx::reshape(mx::transpose(a, {0, 2, 1, 3}), {L, -1});
}

mx::array slice_axis(const mx::array& a, int axis, int start, int stop) {
  mx::Shape lo(a.ndim(), 0);
  mx::Shape hi = a.shape();
  lo[axis] = start;
  hi[axis] = stop;
  return mx::slice(a, lo, hi);
}

// Flips the lowest bit of a row's first byte: the negative control's perturbation.
void perturb_row(Bytes& row) {
  if (!row.empty()) row[0] ^= 1;
}

struct Tally {
  long rows = 0;
  long differ = 0;
  int first_t = -1;    // smallest block size with a differing row
  int first_row = -1;  // that block's first differing row
  std::vector<long> differ_by_t;  // [T - 1]: differing rows of the blocks of T rows
};

void compare_block(Tally& t, int T, const Rows& block, const Rows& chain) {
  if (t.differ_by_t.size() < static_cast<size_t>(T)) t.differ_by_t.resize(T, 0);
  for (int r = 0; r < T; ++r) {
    t.rows++;
    if (block[r] != chain[r]) {
      t.differ++;
      t.differ_by_t[T - 1]++;
      if (t.first_t < 0) {
        t.first_t = T;
        t.first_row = r;
      }
    }
  }
}

// ---- JSON output: names are fixed identifiers, so escaping quotes and backslashes suffices.

std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

using Params = std::vector<std::pair<std::string, long>>;

struct OpRow {
  std::string op;
  std::string dtype;
  Params params;
  Tally tally;
};

void write_op(std::ostream& o, const OpRow& r, int t_max, int seeds) {
  o << "{\"op\":" << quoted(r.op) << ",\"dtype\":" << quoted(r.dtype) << ",\"params\":{";
  for (size_t i = 0; i < r.params.size(); ++i) {
    o << (i ? "," : "") << quoted(r.params[i].first) << ":" << r.params[i].second;
  }
  o << "},\"t_max\":" << t_max << ",\"seeds\":" << seeds << ",\"rows\":" << r.tally.rows
    << ",\"rows_differ\":" << r.tally.differ << ",\"first_t\":";
  if (r.tally.first_t < 0) {
    o << "null";
  } else {
    o << r.tally.first_t;
  }
  o << ",\"differ_by_t\":[";
  for (size_t i = 0; i < r.tally.differ_by_t.size(); ++i) {
    o << (i ? "," : "") << r.tally.differ_by_t[i];
  }
  o << "]}";
}

void progress(const std::string& what) {
  std::cerr << "exactness: " << what << std::endl;
}

// ---- The op table.

// A case: given the seed, make inputs; block(T) gives T rows; chain(t) gives row t.
struct Case {
  std::function<Rows(int T)> block;
  std::function<Bytes(int t)> chain;
};

Tally measure(const Options& opts, const std::function<Case(uint64_t seed)>& make) {
  Tally tally;
  for (int s = 0; s < opts.seeds; ++s) {
    Case c = make(static_cast<uint64_t>(s) + 1000 * opts.seed);
    Rows chain(opts.t_max);
    for (int t = 0; t < opts.t_max; ++t) chain[t] = c.chain(t);
    if (opts.perturb) perturb_row(chain[0]);
    for (int T = 1; T <= opts.t_max; ++T) compare_block(tally, T, c.block(T), chain);
  }
  return tally;
}

mx::array randn(const mx::Shape& shape, mx::Dtype dt, float scale, const mx::array& key) {
  return mx::astype(mx::random::normal(shape, mx::float32, 0.0f, scale, key), dt);
}

std::vector<mx::array> keys(uint64_t seed, int n) {
  auto k = mx::random::split(mx::random::key(seed), n);
  std::vector<mx::array> out;
  for (int i = 0; i < n; ++i) out.push_back(mx::squeeze(slice_axis(k, 0, i, i + 1), 0));
  return out;
}

// Rows of a [1, T, ...] op applied to x[:, :T] against x[:, t:t+1].
Case rowwise(const mx::array& x, const std::function<mx::array(const mx::array&)>& f) {
  return Case{
      [x, f](int T) { return row_bytes(f(slice_axis(x, 1, 0, T)), T); },
      [x, f](int t) { return row_bytes(f(slice_axis(x, 1, t, t + 1)), 1)[0]; }};
}

constexpr int kN = 200;
constexpr int kK = 512;

void qmm_rows(const Options& o, std::vector<OpRow>& out) {
  for (const auto& dn : float_types()) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
      for (int gs : {32, 64, 128}) {
        auto dt = dtype_of(dn);
        auto tally = measure(o, [&](uint64_t seed) {
          auto k = keys(seed, 2);
          auto q = mx::quantize(randn({kN, kK}, dt, 0.05f, k[0]), gs, bits, "affine");
          auto x = randn({1, o.t_max, kK}, dt, 1.0f, k[1]);
          mx::eval(q);
          return rowwise(x, [q, gs, bits](const mx::array& xs) {
            return mx::quantized_matmul(xs, q[0], q[1], q[2], true, gs, bits, "affine");
          });
        });
        out.push_back({"quantized_matmul", dn,
                       {{"bits", bits}, {"group_size", gs}, {"n", kN}, {"k", kK}}, tally});
      }
    }
  }
}

void matmul_rows(const Options& o, std::vector<OpRow>& out) {
  for (const auto& dn : float_types()) {
    auto dt = dtype_of(dn);
    auto tally = measure(o, [&](uint64_t seed) {
      auto k = keys(seed, 2);
      auto w = randn({kN, kK}, dt, 0.05f, k[0]);
      auto x = randn({1, o.t_max, kK}, dt, 1.0f, k[1]);
      mx::eval(w, x);
      return rowwise(x, [w](const mx::array& xs) { return mx::matmul(xs, mx::transpose(w)); });
    });
    out.push_back({"matmul", dn, {{"n", kN}, {"k", kK}}, tally});
  }
}

void norm_softmax_rows(const Options& o, std::vector<OpRow>& out) {
  for (const auto& dn : float_types()) {
    auto dt = dtype_of(dn);
    auto norm = measure(o, [&](uint64_t seed) {
      auto k = keys(seed, 2);
      auto x = randn({1, o.t_max, kK}, dt, 1.0f, k[0]);
      auto w = mx::add(randn({kK}, dt, 0.1f, k[1]), mx::array(1.0f, dt));
      mx::eval(x, w);
      return rowwise(x, [w](const mx::array& xs) { return mx::fast::rms_norm(xs, w, 1e-6f); });
    });
    out.push_back({"rms_norm", dn, {{"d", kK}}, norm});
    for (bool precise : {false, true}) {
      auto sm = measure(o, [&](uint64_t seed) {
        auto x = randn({1, o.t_max, 1000}, dt, 3.0f, keys(seed, 1)[0]);
        mx::eval(x);
        return rowwise(x, [precise](const mx::array& xs) { return mx::softmax(xs, -1, precise); });
      });
      out.push_back({"softmax", dn, {{"v", 1000}, {"precise", precise}}, sm});
    }
    // Few distinct values, so most rows hold ties: argmax must pick the same index.
    auto am = measure(o, [&](uint64_t seed) {
      auto x = mx::astype(mx::random::randint(0, 4, {1, o.t_max, 1000}, mx::int32,
                                              keys(seed, 1)[0]), dt);
      mx::eval(x);
      return rowwise(x, [](const mx::array& xs) { return mx::argmax(xs, -1); });
    });
    out.push_back({"argmax_ties", dn, {{"v", 1000}}, am});
  }
}

constexpr int kHeads = 8;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 128;

void rope_concat_rows(const Options& o, std::vector<OpRow>& out) {
  const int offset = 7;
  for (const auto& dn : float_types()) {
    auto dt = dtype_of(dn);
    auto rope = measure(o, [&](uint64_t seed) {
      auto x = randn({1, kHeads, o.t_max, kHeadDim}, dt, 1.0f, keys(seed, 1)[0]);
      mx::eval(x);
      auto f = [](const mx::array& xs, int off) {
        return heads_to_rows(mx::fast::rope(xs, kHeadDim, false, 10000.0f, 1.0f, off));
      };
      return Case{
          [x, f, offset](int T) { return row_bytes(f(slice_axis(x, 2, 0, T), offset), T); },
          [x, f, offset](int t) {
            return row_bytes(f(slice_axis(x, 2, t, t + 1), offset + t), 1)[0];
          }};
    });
    out.push_back({"rope", dn, {{"head_dim", kHeadDim}, {"offset", offset}}, rope});
    // The KV cache: one concatenation of T rows against T concatenations of one row.
    auto cat = measure(o, [&](uint64_t seed) {
      auto k = keys(seed, 2);
      auto cache = randn({1, kKvHeads, 64, kHeadDim}, dt, 1.0f, k[0]);
      auto x = randn({1, kKvHeads, o.t_max, kHeadDim}, dt, 1.0f, k[1]);
      mx::eval(cache, x);
      auto grown = std::make_shared<std::vector<mx::array>>();
      mx::array c = cache;
      for (int t = 0; t < o.t_max; ++t) {
        c = mx::concatenate({c, slice_axis(x, 2, t, t + 1)}, 2);
        mx::eval(c);
        grown->push_back(c);
      }
      return Case{
          [cache, x](int T) {
            auto c = mx::concatenate({cache, slice_axis(x, 2, 0, T)}, 2);
            return row_bytes(heads_to_rows(slice_axis(c, 2, 64, 64 + T)), T);
          },
          [grown](int t) {
            auto& c = (*grown)[t];
            return row_bytes(heads_to_rows(slice_axis(c, 2, 64 + t, 65 + t)), 1)[0];
          }};
    });
    out.push_back({"kv_concat", dn, {{"cached", 64}}, cat});
  }
}

// Causal attention over a KV cache of L0 entries: the block's T queries see L0 + T keys under
// the causal mask; chain row t sees the first L0 + t + 1 keys with no mask (decode).
void sdpa_rows(const Options& o, std::vector<OpRow>& out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (const auto& dn : float_types()) {
    for (int L0 : o.kv_lens) {
      progress("sdpa " + dn + " kv " + std::to_string(L0));
      auto dt = dtype_of(dn);
      auto tally = measure(o, [&](uint64_t seed) {
        auto k = keys(seed, 3);
        int L = L0 + o.t_max;
        auto q = randn({1, kHeads, o.t_max, kHeadDim}, dt, 1.0f, k[0]);
        auto kk = randn({1, kKvHeads, L, kHeadDim}, dt, 1.0f, k[1]);
        auto v = randn({1, kKvHeads, L, kHeadDim}, dt, 1.0f, k[2]);
        mx::eval(q, kk, v);
        auto attend = [scale](const mx::array& q, const mx::array& k, const mx::array& v) {
          std::string mask = q.shape(2) > 1 ? "causal" : "";
          return heads_to_rows(mx::fast::scaled_dot_product_attention(q, k, v, scale, mask));
        };
        return Case{
            [=](int T) {
              return row_bytes(attend(slice_axis(q, 2, 0, T), slice_axis(kk, 2, 0, L0 + T),
                                      slice_axis(v, 2, 0, L0 + T)),
                               T);
            },
            [=](int t) {
              return row_bytes(attend(slice_axis(q, 2, t, t + 1),
                                      slice_axis(kk, 2, 0, L0 + t + 1),
                                      slice_axis(v, 2, 0, L0 + t + 1)),
                               1)[0];
            }};
      });
      out.push_back({"sdpa_causal", dn,
                     {{"kv", L0}, {"q_heads", kHeads}, {"kv_heads", kKvHeads},
                      {"head_dim", kHeadDim}},
                     tally});
    }
  }
}

// Whether the op table runs `op` (`only=` empty: every op).
bool wanted(const Options& o, std::initializer_list<const char*> ops) {
  return o.only.empty() || std::any_of(ops.begin(), ops.end(), [&](const char* op) {
           return std::find(o.only.begin(), o.only.end(), op) != o.only.end();
         });
}

void run_ops(const Options& o, std::ostream& os) {
  std::vector<OpRow> rows;
  if (wanted(o, {"quantized_matmul"})) {
    progress("quantized_matmul (54 cases)");
    qmm_rows(o, rows);
  }
  progress("matmul, rms_norm, softmax, argmax");
  if (wanted(o, {"matmul"})) matmul_rows(o, rows);
  if (wanted(o, {"rms_norm", "softmax", "argmax_ties"})) norm_softmax_rows(o, rows);
  progress("rope, kv_concat");
  if (wanted(o, {"rope", "kv_concat"})) rope_concat_rows(o, rows);
  if (wanted(o, {"sdpa_causal"})) sdpa_rows(o, rows);
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [&](const OpRow& r) { return !wanted(o, {r.op.c_str()}); }),
             rows.end());
  os << "\"ops\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    os << (i ? "," : "");
    write_op(os, rows[i], o.t_max, o.seeds);
  }
  os << "]";
}

// ---- The decoder.

struct Linear {
  std::vector<mx::array> q;  // wq, scales, biases when quantized
  std::optional<mx::array> dense;
  std::optional<mx::array> bias;  // an additive bias (Qwen2's q/k/v projections)
  int bits = 4;
  int gs = 64;
  mx::array operator()(const mx::array& x) const {
    auto y = dense ? mx::matmul(x, mx::transpose(*dense))
                   : mx::quantized_matmul(x, q[0], q[1], q[2], true, gs, bits, "affine");
    return bias ? mx::add(y, *bias) : y;
  }
};

struct Layer {
  mx::array attn_norm = mx::array(0.0f);
  mx::array mlp_norm = mx::array(0.0f);
  Linear q, k, v, o, gate, up, down;
};

struct Model {
  Dims d;
  mx::Dtype dt = mx::bfloat16;
  mx::array embed = mx::array(0.0f);
  std::vector<Layer> layers;
  mx::array final_norm = mx::array(0.0f);
  Linear head;
};

class Weights {
 public:
  Weights(uint64_t seed, const Dims& d, mx::Dtype dt) : key_(mx::random::key(seed)), d_(d), dt_(dt) {}
  mx::array next_key() {
    auto k = mx::random::split(key_);
    key_ = k.first;
    return k.second;
  }
  Linear linear(int out, int in, bool dense = false) {
    Linear l;
    l.bits = d_.bits;
    l.gs = d_.group_size;
    auto w = randn({out, in}, dt_, 1.0f / std::sqrt(static_cast<float>(in)), next_key());
    if (dense) {
      l.dense = w;
      mx::eval(*l.dense);
    } else {
      l.q = mx::quantize(w, d_.group_size, d_.bits, "affine");
      mx::eval(l.q);
    }
    return l;
  }
  mx::array norm(int n) {
    auto w = mx::add(randn({n}, dt_, 0.1f, next_key()), mx::array(1.0f, dt_));
    mx::eval(w);
    return w;
  }

 private:
  mx::array key_;
  Dims d_;
  mx::Dtype dt_;
};

Model make_model(const Options& o) {
  const Dims& d = o.dims;
  Model m;
  m.d = d;
  m.dt = dtype_of(o.dtype);
  Weights w(o.seed, d, m.dt);
  m.embed = randn({d.vocab, d.d_model}, m.dt, 1.0f, w.next_key());
  mx::eval(m.embed);
  int qd = d.q_heads * d.head_dim;
  int kvd = d.kv_heads * d.head_dim;
  for (int i = 0; i < d.layers; ++i) {
    progress("decoder weights, layer " + std::to_string(i + 1) + "/" + std::to_string(d.layers));
    Layer l;
    l.attn_norm = w.norm(d.d_model);
    l.q = w.linear(qd, d.d_model);
    l.k = w.linear(kvd, d.d_model);
    l.v = w.linear(kvd, d.d_model);
    l.o = w.linear(d.d_model, qd);
    l.mlp_norm = w.norm(d.d_model);
    l.gate = w.linear(d.mlp, d.d_model);
    l.up = w.linear(d.mlp, d.d_model);
    l.down = w.linear(d.d_model, d.mlp);
    m.layers.push_back(std::move(l));
  }
  m.final_norm = w.norm(d.d_model);
  m.head = w.linear(d.vocab, d.d_model, o.dense_head);
  return m;
}

// ---- Checkpoints in MLX's format (mlx-lm's names; config.json is read by the caller).

using Tensors = std::unordered_map<std::string, mx::array>;

Tensors load_tensors(const std::vector<std::string>& files) {
  Tensors all;
  for (const auto& f : files) {
    for (auto& [name, a] : mx::load_safetensors(f).first) all.insert_or_assign(name, a);
  }
  return all;
}

const mx::array& tensor(const Tensors& t, const std::string& name) {
  auto it = t.find(name);
  if (it == t.end()) {
    throw std::invalid_argument("exactness: the checkpoint has no tensor '" + name + "'");
  }
  return it->second;
}

// PREFIX.weight, quantized when PREFIX.scales is there; PREFIX.bias when there.
Linear load_linear(const Tensors& t, const std::string& prefix, const Dims& d) {
  Linear l;
  l.bits = d.bits;
  l.gs = d.group_size;
  if (t.count(prefix + ".scales")) {
    l.q = {tensor(t, prefix + ".weight"), tensor(t, prefix + ".scales"),
           tensor(t, prefix + ".biases")};
  } else {
    l.dense = tensor(t, prefix + ".weight");
  }
  if (t.count(prefix + ".bias")) l.bias = tensor(t, prefix + ".bias");
  return l;
}

Model load_model(const Options& o) {
  Tensors t = load_tensors(o.checkpoint);
  Model m;
  m.d = o.dims;
  m.dt = dtype_of(o.dtype);
  Linear embed = load_linear(t, "model.embed_tokens", o.dims);
  // A quantized table is dequantized once: row for row what a quantized embedding returns.
  m.embed = embed.dense ? *embed.dense
                        : mx::dequantize(embed.q[0], embed.q[1], embed.q[2], embed.gs,
                                         embed.bits, "affine");
  for (int i = 0; i < o.dims.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = tensor(t, p + "input_layernorm.weight");
    l.q = load_linear(t, p + "self_attn.q_proj", o.dims);
    l.k = load_linear(t, p + "self_attn.k_proj", o.dims);
    l.v = load_linear(t, p + "self_attn.v_proj", o.dims);
    l.o = load_linear(t, p + "self_attn.o_proj", o.dims);
    l.mlp_norm = tensor(t, p + "post_attention_layernorm.weight");
    l.gate = load_linear(t, p + "mlp.gate_proj", o.dims);
    l.up = load_linear(t, p + "mlp.up_proj", o.dims);
    l.down = load_linear(t, p + "mlp.down_proj", o.dims);
    m.layers.push_back(std::move(l));
  }
  m.final_norm = tensor(t, "model.norm.weight");
  // Tied embeddings: the head is the embedding's own (quantized) matrix.
  m.head = t.count("lm_head.weight") ? load_linear(t, "lm_head", o.dims) : embed;
  mx::eval(m.embed);
  return m;
}

void name_linear(Tensors& t, const std::string& prefix, const Linear& l) {
  if (l.dense) {
    t.insert_or_assign(prefix + ".weight", *l.dense);
  } else {
    t.insert_or_assign(prefix + ".weight", l.q[0]);
    t.insert_or_assign(prefix + ".scales", l.q[1]);
    t.insert_or_assign(prefix + ".biases", l.q[2]);
  }
  if (l.bias) t.insert_or_assign(prefix + ".bias", *l.bias);
}

// The seeded model under mlx-lm's names (embedding dense, the rest as built).
Tensors named(const Model& m) {
  Tensors t;
  t.insert_or_assign("model.embed_tokens.weight", m.embed);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    const Layer& l = m.layers[i];
    t.insert_or_assign(p + "input_layernorm.weight", l.attn_norm);
    t.insert_or_assign(p + "post_attention_layernorm.weight", l.mlp_norm);
    const std::pair<const char*, const Linear*> lin[] = {
        {"self_attn.q_proj", &l.q}, {"self_attn.k_proj", &l.k}, {"self_attn.v_proj", &l.v},
        {"self_attn.o_proj", &l.o}, {"mlp.gate_proj", &l.gate},  {"mlp.up_proj", &l.up},
        {"mlp.down_proj", &l.down}};
    for (auto& [name, linear] : lin) name_linear(t, p + name, *linear);
  }
  t.insert_or_assign("model.norm.weight", m.final_norm);
  name_linear(t, "lm_head", m.head);
  return t;
}

struct Cache {
  std::vector<mx::array> k, v;
  int len = 0;
  // cache=step: each layer's buffers (k, v), whose first `len` rows k and v are slices of.
  bool step = false;
  std::vector<mx::array> kbuf, vbuf;
};

// mlx-lm's KVCache.update_and_fetch: the buffer grows by whole steps of 256 rows (zeros), the
// new rows are written with slice_update, and the cache is read as a slice of the buffer.
mx::array step_append(mx::array& buf, const mx::array& x, int prev) {
  constexpr int kStep = 256;
  int L = x.shape(2), need = prev + L;
  if (buf.ndim() != 4 || buf.shape(2) < need) {
    int rows = (L + kStep - 1) / kStep * kStep;
    auto grown = mx::zeros({x.shape(0), x.shape(1), rows, x.shape(3)}, x.dtype());
    buf = buf.ndim() == 4 ? mx::concatenate({slice_axis(buf, 2, 0, prev), grown}, 2) : grown;
  }
  buf = mx::slice_update(buf, x, mx::Shape{0, 0, prev, 0},
                         mx::Shape{x.shape(0), x.shape(1), need, x.shape(3)});
  return slice_axis(buf, 2, 0, need);
}

// Appends the block's keys and values to layer i's cache; returns all keys and values.
std::pair<mx::array, mx::array> append_kv(Cache& c, int i, const mx::array& kh,
                                          const mx::array& vh) {
  if (c.step) {
    c.k[i] = step_append(c.kbuf[i], kh, c.len);
    c.v[i] = step_append(c.vbuf[i], vh, c.len);
  } else {
    c.k[i] = c.len > 0 ? mx::concatenate({c.k[i], kh}, 2) : kh;
    c.v[i] = c.len > 0 ? mx::concatenate({c.v[i], vh}, 2) : vh;
  }
  return {c.k[i], c.v[i]};
}

// One named intermediate output, as [L, width] rows.
struct Tap {
  int layer;  // -1 outside the layers
  std::string op;
  mx::array rows;
};

mx::array to_heads(const mx::array& x, int L, int heads, int hd) {
  return mx::transpose(mx::reshape(x, {1, L, heads, hd}), {0, 2, 1, 3});
}

mx::array attention(const Model& m, int i, const mx::array& h, Cache& c, std::vector<Tap>& taps) {
  const Dims& d = m.d;
  const Layer& l = m.layers[i];
  int L = h.shape(1);
  auto tap = [&](const std::string& op, const mx::array& a) {
    taps.push_back({i, op, mx::reshape(a, {L, -1})});
  };
  auto q = l.q(h), k = l.k(h), v = l.v(h);
  tap("q_proj", q);
  tap("k_proj", k);
  tap("v_proj", v);
  auto qh = mx::fast::rope(to_heads(q, L, d.q_heads, d.head_dim), d.head_dim, false,
                           d.rope_base, 1.0f, c.len);
  auto kh = mx::fast::rope(to_heads(k, L, d.kv_heads, d.head_dim), d.head_dim, false,
                           d.rope_base, 1.0f, c.len);
  auto vh = to_heads(v, L, d.kv_heads, d.head_dim);
  tap("rope_q", heads_to_rows(qh));
  tap("rope_k", heads_to_rows(kh));
  std::tie(kh, vh) = append_kv(c, i, kh, vh);
  float scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));
  auto att = mx::fast::scaled_dot_product_attention(qh, kh, vh, scale, L > 1 ? "causal" : "");
  auto rows = mx::reshape(mx::transpose(att, {0, 2, 1, 3}), {1, L, d.q_heads * d.head_dim});
  tap("sdpa", rows);
  auto out = l.o(rows);
  tap("o_proj", out);
  return out;
}

mx::array mlp(const Model& m, int i, const mx::array& h, std::vector<Tap>& taps) {
  const Layer& l = m.layers[i];
  int L = h.shape(1);
  auto tap = [&](const std::string& op, const mx::array& a) {
    taps.push_back({i, op, mx::reshape(a, {L, -1})});
  };
  auto g = l.gate(h), u = l.up(h);
  tap("gate_proj", g);
  tap("up_proj", u);
  auto a = mx::multiply(mx::multiply(g, mx::sigmoid(g)), u);
  tap("swiglu", a);
  auto out = l.down(a);
  tap("down_proj", out);
  return out;
}

// tokens: [1, L] int32. Returns [1, L, vocab] logits; taps in forward order.
mx::array forward(const Model& m, const mx::array& tokens, Cache& c, std::vector<Tap>& taps) {
  int L = tokens.shape(1);
  if (c.k.empty()) {
    for (auto* a : {&c.k, &c.v, &c.kbuf, &c.vbuf}) a->assign(m.d.layers, mx::array(0.0f));
  }
  auto x = mx::take(m.embed, tokens, 0);
  for (int i = 0; i < m.d.layers; ++i) {
    auto h = mx::fast::rms_norm(x, m.layers[i].attn_norm, m.d.eps);
    taps.push_back({i, "attn_norm", mx::reshape(h, {L, -1})});
    x = mx::add(x, attention(m, i, h, c, taps));
    taps.push_back({i, "attn_residual", mx::reshape(x, {L, -1})});
    h = mx::fast::rms_norm(x, m.layers[i].mlp_norm, m.d.eps);
    taps.push_back({i, "mlp_norm", mx::reshape(h, {L, -1})});
    x = mx::add(x, mlp(m, i, h, taps));
    taps.push_back({i, "mlp_residual", mx::reshape(x, {L, -1})});
  }
  x = mx::fast::rms_norm(x, m.final_norm, m.d.eps);
  taps.push_back({-1, "final_norm", mx::reshape(x, {L, -1})});
  auto logits = m.head(x);
  taps.push_back({-1, "logits", mx::reshape(logits, {L, -1})});
  c.len += L;
  return logits;
}

void eval_all(const std::vector<Tap>& taps, const Cache& c) {
  std::vector<mx::array> all;
  for (auto& t : taps) all.push_back(t.rows);
  for (auto& a : c.k) all.push_back(a);
  for (auto& a : c.v) all.push_back(a);
  mx::eval(all);
}

int32_t argmax_row(const mx::array& logits_rows, int r) {
  auto a = mx::argmax(slice_axis(logits_rows, 0, r, r + 1), -1);
  mx::eval(a);
  return static_cast<int32_t>(a.item<uint32_t>());
}

struct Block {
  int k = 0;
  int rows_identical = 0;
  int tokens_same = 0;
  int first_row = -1;
  int first_layer = 0;
  std::string first_op;
};

// Classic decode from the prompt's cache: one token per forward, each step's taps kept.
struct Classic {
  std::vector<int32_t> tokens;  // t0 .. t_kmax (t_{i+1} = argmax of step i)
  std::vector<std::vector<Tap>> taps;
};

Classic decode(const Model& m, const Cache& prompt_cache, int32_t t0, int k_max) {
  Classic cl;
  cl.tokens.push_back(t0);
  Cache c = prompt_cache;
  for (int i = 0; i < k_max; ++i) {
    std::vector<Tap> taps;
    int32_t tok = cl.tokens.back();
    forward(m, mx::array(&tok, {1, 1}, mx::int32), c, taps);
    eval_all(taps, c);
    cl.tokens.push_back(argmax_row(taps.back().rows, 0));
    cl.taps.push_back(std::move(taps));
  }
  return cl;
}

Block verify(const Model& m, const Cache& prompt_cache, const Classic& cl, int k, bool perturb) {
  Cache c = prompt_cache;
  std::vector<Tap> taps;
  std::vector<int32_t> drafted(cl.tokens.begin(), cl.tokens.begin() + k);
  forward(m, mx::array(drafted.data(), {1, k}, mx::int32), c, taps);
  eval_all(taps, c);
  Block b;
  b.k = k;
  auto logits = row_bytes(taps.back().rows, k);
  for (int r = 0; r < k; ++r) {
    Bytes chain = row_bytes(cl.taps[r].back().rows, 1)[0];
    if (perturb && r == 0) perturb_row(chain);
    if (logits[r] == chain) b.rows_identical++;
    if (argmax_row(taps.back().rows, r) == cl.tokens[r + 1]) b.tokens_same++;
  }
  if (b.rows_identical == k && !perturb) return b;
  // The first op, in forward order, whose output differs in any row.
  for (size_t j = 0; j < taps.size() && b.first_row < 0; ++j) {
    auto rows = row_bytes(taps[j].rows, k);
    for (int r = 0; r < k; ++r) {
      Bytes chain = row_bytes(cl.taps[r][j].rows, 1)[0];
      if (perturb && r == 0 && j + 1 == taps.size()) perturb_row(chain);
      if (rows[r] != chain) {
        b.first_row = r;
        b.first_layer = taps[j].layer;
        b.first_op = taps[j].op;
        break;
      }
    }
  }
  return b;
}

// ---- Timing (timing=R): what verification costs under this process's policy.

GpuMeter& gpu_meter() {
  static GpuMeter meter;
  return meter;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One timed quantity: the median of its repetitions' wall milliseconds and, where a GPU meter
// is set, of what the GPU did in each (the same repetitions).
struct Timed {
  double wall_ms = 0;
  bool has_gpu = false;
  GpuTime gpu;
};

// `reps` calls of f after one warm-up call; f evaluates its work. The wall time is f's own (a
// meter's synchronizing and flushing around it not counted); `gpu`: measure the GPU too.
Timed median_ms(int reps, const std::function<void()>& f, bool gpu = false) {
  f();
  std::vector<double> wall, busy, qmm, kernels, graph, graphs;
  std::vector<std::vector<KernelTime>> by_kernel;
  const GpuMeter* meter = gpu && gpu_meter() ? &gpu_meter() : nullptr;
  for (int r = 0; r < reps; ++r) {
    double w = 0;
    auto timed = [&] {
      auto t = std::chrono::steady_clock::now();
      f();
      w = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    };
    GpuTime g;
    if (meter) {
      g = (*meter)(timed);
    } else {
      timed();
    }
    wall.push_back(w);
    busy.push_back(g.busy_ms);
    qmm.push_back(g.qmm_ms);
    kernels.push_back(static_cast<double>(g.kernels));
    graph.push_back(g.graph_ms);
    graphs.push_back(static_cast<double>(g.graphs));
    by_kernel.push_back(std::move(g.by_kernel));
  }
  Timed out{median(wall), meter != nullptr, {}};
  out.gpu = {median(busy), median(qmm), static_cast<long>(median(kernels)), median(graph),
             static_cast<long>(median(graphs)), {}};
  // Where the time went: the names of the repetition whose busy time is the median.
  for (size_t r = 0; r < busy.size(); ++r) {
    if (busy[r] == out.gpu.busy_ms) {
      out.gpu.by_kernel = by_kernel[r];
      break;
    }
  }
  return out;
}

// The token ids of a timed forward: with tokens=device an array in device memory, made once
// (the sum with 0 writes a new buffer while the host array is still held, so none is donated);
// with tokens=host nothing (each repetition builds its own from host data).
std::optional<mx::array> device_tokens(const std::vector<int32_t>& toks, const Options& o) {
  if (o.tokens != "device") return std::nullopt;
  auto host = mx::array(toks.data(), {1, static_cast<int>(toks.size())}, mx::int32);
  auto dev = mx::add(host, mx::array(0, mx::int32));
  mx::eval(dev);
  return dev;
}

// One forward of k tokens from the prompt's cache, logits and cache evaluated. The cache is
// owned by the timing alone and rewound after each forward, so with cache=step its buffers are
// updated in place (donated), as mlx-lm's are.
Timed forward_ms(const Model& m, const Cache& pc, const std::vector<int32_t>& toks, int reps,
                 const Options& o) {
  Cache tc = pc;
  int k = static_cast<int>(toks.size());
  const std::optional<mx::array> dev = device_tokens(toks, o);
  return median_ms(reps, [&] {
    Cache c = std::move(tc);
    std::vector<Tap> taps;
    auto ids = dev ? *dev : mx::array(toks.data(), {1, k}, mx::int32);
    std::vector<mx::array> all = {forward(m, ids, c, taps)};
    all.insert(all.end(), c.k.begin(), c.k.end());
    all.insert(all.end(), c.v.begin(), c.v.end());
    mx::eval(all);
    c.len = pc.len;
    for (int i = 0; i < m.d.layers; ++i) {
      c.k[i] = c.step ? slice_axis(c.kbuf[i], 2, 0, pc.len) : pc.k[i];
      c.v[i] = c.step ? slice_axis(c.vbuf[i], 2, 0, pc.len) : pc.v[i];
    }
    tc = std::move(c);
  }, true);
}

// The attention op alone as the decoder calls it over k rows after the prompt: q [1, H, k, D]
// against prompt + k keys (causal for k > 1; slices of a 256-row-step buffer with cache=step),
// once per layer in one evaluation; milliseconds per call.
double sdpa_ms(const Model& m, const Cache& pc, int k, int reps) {
  const Dims& d = m.d;
  auto dt = m.embed.dtype();
  int L = pc.len + k, rows = pc.step ? (L + 255) / 256 * 256 : L;
  auto key = keys(7, 3);
  auto q = randn({1, d.q_heads, k, d.head_dim}, dt, 1.0f, key[0]);
  auto kb = randn({1, d.kv_heads, rows, d.head_dim}, dt, 1.0f, key[1]);
  auto vb = randn({1, d.kv_heads, rows, d.head_dim}, dt, 1.0f, key[2]);
  mx::eval(q, kb, vb);
  auto kk = slice_axis(kb, 2, 0, L), vv = slice_axis(vb, 2, 0, L);
  float scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));
  double ms = median_ms(reps, [&] {
    std::vector<mx::array> outs;
    for (int i = 0; i < d.layers; ++i) {
      outs.push_back(mx::fast::scaled_dot_product_attention(q, kk, vv, scale,
                                                            k > 1 ? "causal" : ""));
    }
    mx::eval(outs);
  }).wall_ms;
  return ms / d.layers;
}

void write_timing(std::ostream& os, const Model& m, const Cache& pc, const Classic& cl,
                  const Options& o) {
  os << ",\"timing\":{\"reps\":" << o.timing << ",\"tokens\":" << quoted(o.tokens)
     << ",\"rows\":[";
  bool first = true;
  for (int k : {1, 4, 8, 16}) {
    if (k > o.k_max) continue;
    progress("decoder timing, k = " + std::to_string(k));
    std::vector<int32_t> toks(cl.tokens.begin(), cl.tokens.begin() + k);
    Timed fwd = forward_ms(m, pc, toks, o.timing, o);
    double att = sdpa_ms(m, pc, k, o.timing);
    os << (first ? "" : ",") << "{\"k\":" << k << ",\"forward_ms\":" << fwd.wall_ms
       << ",\"sdpa_ms\":" << att;
    if (fwd.has_gpu) {
      os << ",\"gpu_ms\":" << fwd.gpu.busy_ms << ",\"gpu_qmm_ms\":" << fwd.gpu.qmm_ms
         << ",\"gpu_kernels\":" << fwd.gpu.kernels << ",\"gpu_graph_ms\":" << fwd.gpu.graph_ms
         << ",\"gpu_graphs\":" << fwd.gpu.graphs << ",\"gpu_by_kernel\":[";
      for (size_t i = 0; i < fwd.gpu.by_kernel.size(); ++i) {
        const KernelTime& t = fwd.gpu.by_kernel[i];
        os << (i ? "," : "") << "[" << quoted(t.name) << "," << t.ms << "," << t.launches << "]";
      }
      os << "]";
    }
    os << "}";
    first = false;
  }
  os << "]}";
}

// A forward's taps by name: "layer/op", or the op alone outside the layers.
std::vector<std::string> tap_names(const std::vector<Tap>& taps) {
  std::vector<std::string> names;
  for (auto& t : taps) names.push_back(t.layer < 0 ? t.op : std::to_string(t.layer) + "/" + t.op);
  return names;
}

// flip: the first tap's digest of its bytes with one bit flipped (repeat's control).
std::vector<std::string> tap_digests(const std::vector<Tap>& taps, bool flip = false) {
  std::vector<std::string> out;
  for (auto& t : taps) out.push_back(digest(t.rows, flip && out.empty()));
  return out;
}

void write_strings(std::ostream& os, const std::vector<std::string>& v) {
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << quoted(v[i]);
  os << "]";
}

// The prompt forward's tap names and digests (taps=1; else empty), taken before its taps are
// let go.
struct PrefillTaps {
  std::vector<std::string> names, digests;
};

// repeat=N: the tap digests of each repeated prompt forward and first decode step.
struct Repeats {
  std::vector<std::vector<std::string>> prefill, decode;
};

Repeats repeat_forwards(const Model& m, const mx::array& prompt, const Cache& pc, int32_t t0,
                        const Options& o) {
  Repeats r;
  for (int i = 0; i < o.repeat; ++i) {
    progress("decoder repeat " + std::to_string(i + 1) + " of " + std::to_string(o.repeat));
    Cache c;
    c.step = pc.step;
    std::vector<Tap> taps;
    forward(m, prompt, c, taps);
    eval_all(taps, c);
    r.prefill.push_back(tap_digests(taps, o.perturb));
    taps.clear();
    Cache d = pc;
    forward(m, mx::array(&t0, {1, 1}, mx::int32), d, taps);
    eval_all(taps, d);
    r.decode.push_back(tap_digests(taps, o.perturb));
  }
  return r;
}

void write_lists(std::ostream& os, const std::vector<std::vector<std::string>>& lists) {
  os << "[";
  for (size_t i = 0; i < lists.size(); ++i) write_strings(os << (i ? "," : ""), lists[i]);
  os << "]";
}

// Fingerprints another process's run of the same configuration can be compared with (`xtask
// exactness --from` groups such runs): each layer's keys and values after the prompt, the
// prompt's last logit row, and each classic decode step's logit row; with taps=1 also every
// tap of the prompt's forward and of each decode step (the same names in each forward). Where
// two runs first differ says whether the prompt's forward or a decode step is not
// reproducible, and with the taps which op first.
void write_digests(std::ostream& os, const Cache& pc, const mx::array& prompt_logits,
                   const Classic& cl, const PrefillTaps& pt, const Repeats& reps) {
  os << ",\"digests\":{\"prefill_kv\":[";
  for (size_t i = 0; i < pc.k.size(); ++i) {
    auto kv = mx::concatenate({mx::flatten(pc.k[i]), mx::flatten(pc.v[i])});
    os << (i ? "," : "") << quoted(digest(kv));
  }
  int last = prompt_logits.shape(0) - 1;
  os << "],\"prefill_logits\":" << quoted(digest(slice_axis(prompt_logits, 0, last, last + 1)))
     << ",\"decode_logits\":[";
  for (size_t i = 0; i < cl.taps.size(); ++i) {
    os << (i ? "," : "") << quoted(digest(cl.taps[i].back().rows));
  }
  os << "]";
  if (!pt.names.empty()) {
    write_strings(os << ",\"taps\":", pt.names);
    write_strings(os << ",\"prefill_taps\":", pt.digests);
    std::vector<std::vector<std::string>> steps;
    for (auto& s : cl.taps) steps.push_back(tap_digests(s));
    write_lists(os << ",\"decode_taps\":", steps);
  }
  if (!reps.prefill.empty()) {
    write_lists(os << ",\"prefill_repeats\":", reps.prefill);
    write_lists(os << ",\"decode_repeats\":", reps.decode);
  }
  os << "}";
}

void write_dims(std::ostream& os, const Dims& d) {
  os << "{\"vocab\":" << d.vocab << ",\"d_model\":" << d.d_model << ",\"layers\":" << d.layers
     << ",\"q_heads\":" << d.q_heads << ",\"kv_heads\":" << d.kv_heads
     << ",\"head_dim\":" << d.head_dim << ",\"mlp\":" << d.mlp << ",\"bits\":" << d.bits
     << ",\"group_size\":" << d.group_size << "}";
}

void write_block(std::ostream& os, const Block& b) {
  os << "{\"k\":" << b.k << ",\"logit_rows\":" << b.k
     << ",\"logit_rows_identical\":" << b.rows_identical << ",\"tokens_same\":" << b.tokens_same
     << ",\"first_diff\":";
  if (b.first_row < 0) {
    os << "null}";
    return;
  }
  os << "{\"row\":" << b.first_row << ",\"layer\":";
  if (b.first_layer < 0) {
    os << "null";
  } else {
    os << b.first_layer;
  }
  os << ",\"op\":" << quoted(b.first_op) << "}}";
}

void check_dims(const Options& o) {
  const Dims& d = o.dims;
  if (d.vocab < 2 || d.d_model < 1 || d.layers < 1 || d.q_heads < 1 || d.kv_heads < 1 ||
      d.head_dim < 2 || d.mlp < 1) {
    throw std::invalid_argument("exactness: decoder dims must be positive (vocab >= 2)");
  }
  if (d.q_heads % d.kv_heads != 0) {
    throw std::invalid_argument("exactness: q_heads must be a multiple of kv_heads");
  }
  if (o.prompt < 1 || o.k_max < 2) {
    throw std::invalid_argument("exactness: prompt must be >= 1 and k_max >= 2");
  }
}

void run_decoder(const Options& o, std::ostream& os) {
  check_dims(o);
  auto started = std::chrono::steady_clock::now();
  Model m = o.checkpoint.empty() ? make_model(o) : load_model(o);
  auto prompt = mx::random::randint(0, o.dims.vocab, {1, o.prompt}, mx::int32,
                                    mx::random::key(o.seed + 1));
  Cache pc;
  pc.step = o.cache == "step";
  std::vector<Tap> ptaps;
  progress("decoder prefill, " + std::to_string(o.prompt) + " tokens");
  forward(m, prompt, pc, ptaps);
  eval_all(ptaps, pc);
  int32_t t0 = argmax_row(ptaps.back().rows, o.prompt - 1);
  PrefillTaps pt;
  if (o.tap_digests || o.repeat > 0) {
    progress("decoder prefill digests, " + std::to_string(ptaps.size()) + " taps");
    pt = {tap_names(ptaps), tap_digests(ptaps)};
  }
  ptaps.erase(ptaps.begin(), ptaps.end() - 1);  // the logits alone, for the digests
  progress("decoder classic decode, " + std::to_string(o.k_max) + " tokens");
  Classic cl = decode(m, pc, t0, o.k_max);
  Repeats reps = repeat_forwards(m, prompt, pc, t0, o);
  os << "\"decoder\":{\"preset\":" << quoted(o.preset) << ",\"dims\":";
  write_dims(os, o.dims);
  os << ",\"dtype\":" << quoted(o.dtype) << ",\"dense_head\":" << (o.dense_head ? "true" : "false")
     << ",\"prompt\":" << o.prompt << ",\"cache\":" << quoted(o.cache) << ",\"seed\":" << o.seed
     << ",\"decoded\":[";
  for (size_t i = 0; i < cl.tokens.size(); ++i) os << (i ? "," : "") << cl.tokens[i];
  os << "]";
  write_digests(os, pc, ptaps.back().rows, cl, pt, reps);
  ptaps.clear();
  os << ",\"blocks\":[";
  for (int k = 2; k <= o.k_max; ++k) {
    progress("decoder verify, k = " + std::to_string(k));
    write_block(os << (k > 2 ? "," : ""), verify(m, pc, cl, k, o.perturb));
  }
  os << "]";
  if (o.timing > 0) write_timing(os, m, pc, cl, o);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  os << ",\"seconds\":" << secs << "}";
}

// A decoder's shapes; the quantization and norm settings keep their defaults.
Dims shapes(int vocab, int d_model, int layers, int q_heads, int kv_heads, int head_dim, int mlp,
            float rope_base) {
  Dims d;
  d.vocab = vocab;
  d.d_model = d_model;
  d.layers = layers;
  d.q_heads = q_heads;
  d.kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.mlp = mlp;
  d.rope_base = rope_base;
  return d;
}

// The decoder presets; "preset=NAME" sets these dims, and later dims options override them.
Dims preset_dims(const std::string& name) {
  if (name == "small") return shapes(2048, 512, 4, 8, 2, 64, 1024, 10000.0f);
  // Qwen2.5-7B's shapes.
  if (name == "7b") return shapes(152064, 3584, 28, 28, 4, 128, 18944, 1000000.0f);
  throw std::invalid_argument("exactness: preset must be small or 7b, got '" + name + "'");
}

// The whole of `v` parsed by `parse` (std::stoi, std::stof), else an error naming the option.
template <typename T, typename Parse>
T parsed(const std::string& key, const std::string& v, Parse parse, const char* what) {
  try {
    size_t used = 0;
    T x = parse(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("exactness: option " + key + " needs " + what + ", got '" + v + "'");
}

int int_value(const std::string& key, const std::string& v) {
  return parsed<int>(key, v, [](auto& s, size_t* n) { return std::stoi(s, n); }, "an integer");
}

float float_value(const std::string& key, const std::string& v) {
  return parsed<float>(key, v, [](auto& s, size_t* n) { return std::stof(s, n); }, "a number");
}

} // namespace

void write_checkpoint(const Options& opts, const std::string& file) {
  check_dims(opts);
  mx::save_safetensors(file, named(make_model(opts)), {{"format", "mlx"}});
}

void run(const Options& opts, std::ostream& out) {
  if (opts.t_max < 1 || opts.seeds < 1 || opts.timing < 0 || opts.repeat < 0) {
    throw std::invalid_argument("exactness: t_max and seeds must be >= 1, timing and repeat >= 0");
  }
  out << "{\"probe\":1,\"device\":"
      << quoted(mx::default_device() == mx::Device::gpu ? "gpu" : "cpu")
      << ",\"perturbed\":" << (opts.perturb ? "true" : "false");
  if (opts.ops) run_ops(opts, out << ",");
  if (opts.decoder) run_decoder(opts, out << ",");
  out << "}\n";
}

Options parse_options(const std::string& spec) {
  Options o;
  o.dims = preset_dims(o.preset);
  const std::map<std::string, int*> ints = {
      {"t_max", &o.t_max},          {"seeds", &o.seeds},          {"timing", &o.timing},
      {"prompt", &o.prompt},        {"k_max", &o.k_max},
      {"vocab", &o.dims.vocab},     {"d_model", &o.dims.d_model},
      {"layers", &o.dims.layers},   {"q_heads", &o.dims.q_heads},
      {"kv_heads", &o.dims.kv_heads}, {"head_dim", &o.dims.head_dim},
      {"mlp", &o.dims.mlp},         {"bits", &o.dims.bits},
      {"group_size", &o.dims.group_size}, {"repeat", &o.repeat}};
  const std::map<std::string, bool*> flags = {
      {"ops", &o.ops}, {"decoder", &o.decoder}, {"dense_head", &o.dense_head},
      {"perturb", &o.perturb}, {"taps", &o.tap_digests}};
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string v = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos) {
      throw std::invalid_argument("exactness: unknown option '" + item + "'");
    } else if (ints.count(key)) {
      *ints.at(key) = int_value(key, v);
    } else if (flags.count(key)) {
      *flags.at(key) = int_value(key, v) != 0;
    } else if (key == "seed") {
      o.seed = static_cast<uint64_t>(int_value(key, v));
    } else if (key == "preset") {
      o.dims = preset_dims(v);
      o.preset = v;
    } else if (key == "dtype") {
      dtype_of(v);
      o.dtype = v;
    } else if (key == "rope_base" || key == "eps") {
      (key == "eps" ? o.dims.eps : o.dims.rope_base) = float_value(key, v);
    } else if (key == "checkpoint") {
      o.checkpoint.clear();
      std::stringstream fs(v);
      std::string f;
      while (std::getline(fs, f, '|')) o.checkpoint.push_back(f);
      o.preset = "checkpoint";
    } else if (key == "cache") {
      if (v != "concat" && v != "step") {
        throw std::invalid_argument("exactness: cache must be concat or step, got '" + v + "'");
      }
      o.cache = v;
    } else if (key == "tokens") {
      if (v != "device" && v != "host") {
        throw std::invalid_argument("exactness: tokens must be device or host, got '" + v + "'");
      }
      o.tokens = v;
    } else if (key == "only") {
      o.only.clear();
      std::stringstream ls(v);
      std::string n;
      while (std::getline(ls, n, ',')) o.only.push_back(n);
    } else if (key == "kv_lens") {
      o.kv_lens.clear();
      std::stringstream ls(v);
      std::string n;
      while (std::getline(ls, n, ',')) o.kv_lens.push_back(int_value(key, n));
    } else {
      throw std::invalid_argument("exactness: unknown option '" + item + "'");
    }
  }
  return o;
}

void set_gpu_meter(GpuMeter meter) { gpu_meter() = std::move(meter); }

} // namespace exactness
