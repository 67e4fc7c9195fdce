// Driver for MLX's SDPA vector kernels (included at the end of the generated
// unit, after the extracted kernels, the function-constant globals and the
// extracted host rules). One request per stdin line, one JSON object per line:
//   plan DEVC T N GQA ISGQA streamed|upstream
//       the launches MLX's host code makes for T causal query rows over N keys
//       on a device whose architecture ends in DEVC: [[row0, rows, kv_len,
//       two_pass, blocks], ...]. streamed: the extracted sdpa_vector_row_runs;
//       upstream: one launch, sdpa_vector_two_pass(devc, N, gqa) and
//       sdpa_vector_blocks(devc, N, gqa * T), as eval_gpu's upstream branch
//       calls them (scaled_dot_product_attention.cpp, eval_gpu, vector mode).
//   attn TY D HQ HKV CAP SEED ROW0 ROWS KV_LEN CAUSAL TWO_PASS BLOCKS
//       one launch as the host's sdpa_vector / sdpa_vector_2pass makes it, over
//       query rows [ROW0, ROW0 + ROWS) (copied contiguous, as the host's
//       contiguous_copy_gpu does) and the first KV_LEN keys of a cache of CAP
//       positions: {"rows": [hash per query row over all heads], "error": ...}.
// Inputs are a pure function of (TY, D, HQ, HKV, CAP, SEED): queries [HQ][16][D],
// keys and values [HKV][CAP][D], uniform in [-1, 1), rounded to TY.

#include "rng.h"

namespace sdrv {

using msim::tg::Launch;
using msim::tg::ThreadIds;

constexpr int kMaxRows = 16;

using msim::Rng;

struct Req {
  std::string ty;
  int D = 0, hq = 0, hkv = 0, cap = 0;
  uint64_t seed = 0;
  int row0 = 0, rows = 0, kv_len = 0, blocks = 0;
  bool causal = false, two_pass = false;
};

template <class T>
struct Data {
  std::vector<T> q, k, v;
};

template <class T>
Data<T> make_data(const Req& r) {
  Rng g{r.seed * 0x100000001b3ull ^ uint64_t(r.D * 131 + r.hq * 17 + r.hkv * 7 + r.cap)};
  Data<T> d;
  for (int i = 0; i < r.hq * kMaxRows * r.D; i++) d.q.push_back(T(g.uniform()));
  for (int i = 0; i < r.hkv * r.cap * r.D; i++) d.k.push_back(T(g.uniform()));
  for (int i = 0; i < r.hkv * r.cap * r.D; i++) d.v.push_back(T(g.uniform()));
  return d;
}

template <class T>
T sentinel() {
  T t;
  std::memset(&t, 0x7f, sizeof(T));
  return t;
}

uint64_t fnv(const void* p, size_t n, uint64_t h) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void set_constants(const Req& r) {
  has_mask = false;
  query_transposed = false;
  do_causal = r.causal;
  bool_mask = false;
  float_mask = false;
  has_sinks = false;
  blocks = r.blocks;
}

uint3 u3(ushort3 v) { return uint3{v.x, v.y, v.z}; }

// sdpa_vector: grid (B * H, q_len, 1), threadgroup (1024, 1, 1).
template <class T, int D>
std::string one_pass(const Req& r, const T* q, const Data<T>& d, T* out) {
  Launch L{{uint32_t(r.hq), uint32_t(r.rows), 1}, {1024, 1, 1}, 0};
  uint3 tpg{uint32_t(r.hq), uint32_t(r.rows), 1};
  int gqa = r.hq / r.hkv, N = r.kv_len, zero = 0;
  size_t hs = size_t(r.cap) * D, ss = D;
  float scale = 1.0f / std::sqrt(float(D));
  return msim::tg::launch(L, [&](const ThreadIds& id) {
    sdpa_vector<T, D, D>(q, d.k.data(), d.v.data(), out, gqa, N, hs, ss, hs, ss, scale, nullptr,
                         nullptr, zero, zero, zero, nullptr, zero, id.tgpig, tpg, id.sgitg,
                         id.tiisg);
  });
}

// sdpa_vector_2pass_1: grid (KV heads, B, blocks), threadgroup (32, gqa, q_len);
// sdpa_vector_2pass_2: grid (B * H, q_len, 1), threadgroup (1024, 1, 1).
template <class T, int D>
std::string two_pass(const Req& r, const T* q, const Data<T>& d, T* out) {
  int gqa = r.hq / r.hkv, N = r.kv_len, zero = 0, nb = r.blocks;
  if (32 * gqa * r.rows > 1024) return "2-pass threadgroup of " + std::to_string(32 * gqa * r.rows) + " threads";
  size_t hs = size_t(r.cap) * D, ss = D;
  float scale = 1.0f / std::sqrt(float(D));
  size_t n = size_t(r.hq) * r.rows * nb;
  std::vector<T> partials(n * D, sentinel<T>());
  std::vector<float> sums(n, sentinel<float>()), maxs(n, sentinel<float>());
  Launch L1{{uint32_t(r.hkv), 1, uint32_t(nb)}, {32, uint32_t(gqa), uint32_t(r.rows)}, 0};
  uint3 tptg{32, uint32_t(gqa), uint32_t(r.rows)}, tpg1{uint32_t(r.hkv), 1, uint32_t(nb)};
  std::string e = msim::tg::launch(L1, [&](const ThreadIds& id) {
    sdpa_vector_2pass_1<T, D, D>(q, d.k.data(), d.v.data(), partials.data(), sums.data(),
                                 maxs.data(), N, hs, ss, hs, ss, scale, nullptr, nullptr, zero,
                                 zero, zero, nullptr, tptg, u3(id.tpitg), id.tgpig, tpg1, id.tiisg);
  });
  if (!e.empty()) return e;
  Launch L2{{uint32_t(r.hq), uint32_t(r.rows), 1}, {1024, 1, 1}, 0};
  uint3 tpg2{uint32_t(r.hq), uint32_t(r.rows), 1};
  return msim::tg::launch(L2, [&](const ThreadIds& id) {
    sdpa_vector_2pass_2<T, D>(partials.data(), sums.data(), maxs.data(), out, nb, id.tgpig, tpg2,
                              id.sgitg, id.tiisg);
  });
}

template <class T, int D>
std::string attn(const Req& r) {
  if (r.row0 < 0 || r.rows < 1 || r.row0 + r.rows > kMaxRows || r.kv_len > r.cap ||
      r.hkv < 1 || r.hq % r.hkv != 0)
    return "{\"rows\": [], \"error\": \"bad request\"}";
  static std::map<std::string, Data<T>> cache;
  std::string key = std::to_string(r.hq) + "/" + std::to_string(r.hkv) + "/" + std::to_string(r.cap) +
                    "/" + std::to_string(r.seed);
  if (!cache.count(key)) cache[key] = make_data<T>(r);
  const Data<T>& d = cache[key];
  std::vector<T> q;
  for (int h = 0; h < r.hq; h++)
    for (int j = 0; j < r.rows; j++)
      for (int i = 0; i < D; i++) q.push_back(d.q[(size_t(h) * kMaxRows + r.row0 + j) * D + i]);
  std::vector<T> out(size_t(r.hq) * r.rows * D, sentinel<T>());
  set_constants(r);
  std::string e = r.two_pass ? two_pass<T, D>(r, q.data(), d, out.data())
                             : one_pass<T, D>(r, q.data(), d, out.data());
  T s = sentinel<T>();
  for (const T& o : out)
    if (e.empty() && std::memcmp(&o, &s, sizeof(T)) == 0) e = "an output was not written";
  std::ostringstream js;
  js << "{\"rows\": [";
  for (int j = 0; j < r.rows; j++) {
    uint64_t h = 1469598103934665603ull;
    for (int hd = 0; hd < r.hq; hd++) h = fnv(&out[(size_t(hd) * r.rows + j) * D], D * sizeof(T), h);
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
    js << (j ? ", " : "") << "\"" << buf << "\"";
  }
  js << "], \"error\": \"" << e << "\"}";
  return js.str();
}

template <int D>
std::string attn_d(const Req& r) {
  if (r.ty == "float32") return attn<float, D>(r);
  if (r.ty == "float16") return attn<half, D>(r);
  if (r.ty == "bfloat16") return attn<bfloat16_t, D>(r);
  return "{\"rows\": [], \"error\": \"unknown type\"}";
}

std::string plan(std::istringstream& in) {
  std::string devc, policy;
  int T = 0, N = 0, gqa = 0, isgqa = 0;
  in >> devc >> T >> N >> gqa >> isgqa >> policy;
  std::vector<msim_host::SdpaVectorRun> runs;
  char c = devc.empty() ? '?' : devc.back();
  if (policy == "streamed") {
    runs = msim_host::sdpa_vector_row_runs(c, T, N, gqa, isgqa != 0);
  } else {
    bool two = msim_host::sdpa_vector_two_pass(c, N, isgqa != 0);
    runs.push_back({0, T, N, two, two ? msim_host::sdpa_vector_blocks(c, N, gqa * T) : 0});
  }
  std::ostringstream js;
  js << "{\"runs\": [";
  for (size_t i = 0; i < runs.size(); i++) {
    const auto& r = runs[i];
    js << (i ? ", " : "") << "[" << r.row0 << ", " << r.rows << ", " << r.kv_len << ", "
       << (r.two_pass ? 1 : 0) << ", " << r.blocks << "]";
  }
  js << "], \"error\": \"\"}";
  return js.str();
}

std::string handle(const std::string& line) {
  std::istringstream in(line);
  std::string op;
  in >> op;
  if (op == "plan") return plan(in);
  if (op != "attn") return "{\"rows\": [], \"error\": \"unknown request\"}";
  Req r;
  int causal = 0, two = 0;
  in >> r.ty >> r.D >> r.hq >> r.hkv >> r.cap >> r.seed >> r.row0 >> r.rows >> r.kv_len >> causal >>
      two >> r.blocks;
  r.causal = causal != 0;
  r.two_pass = two != 0;
  if (r.D == 64) return attn_d<64>(r);
  if (r.D == 128) return attn_d<128>(r);
  return "{\"rows\": [], \"error\": \"unsupported head dim\"}";
}

}  // namespace sdrv

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << sdrv::handle(line) << std::endl;
  }
  return 0;
}
