// Driver for the kernel binary. Included by the generated translation unit
// after the kernel code extracted from the tree under test; the generated
// code then defines kEntries (one launcher per instantiation it needs).
//
// stdin, one case per line:
//   case ID KEY TYPE GS BITS M N K GX GY GZ BX BY BZ SEED ORDER RECORD THREADS
// stdout, one JSON object per case.
// Inputs depend only on (SEED, TYPE, GS, BITS, M, N, K), so every kernel run
// on the same case sees the same bytes.

#include "rng.h"

namespace msim_harness {

struct Ctx {
  const uint32_t* w;
  const void* s;
  const void* b;
  const void* x;
  void* y;
  int K, N, M;
  msim::Dims dims;
};

// A case's buffers as the kernels' element type, and its sizes as the lvalues the kernels'
// `const constant int&` parameters bind to.
template <class T>
struct Io {
  const T* s;
  const T* b;
  const T* x;
  T* y;
  int K, N, M;
  explicit Io(const Ctx& c)
      : s(static_cast<const T*>(c.s)),
        b(static_cast<const T*>(c.b)),
        x(static_cast<const T*>(c.x)),
        y(static_cast<T*>(c.y)),
        K(c.K),
        N(c.N),
        M(c.M) {}
};

using LaunchFn = std::string (*)(const Ctx&);
struct Entry {
  const char* key;
  LaunchFn fn;
};

// One call of `body(io, id)` per thread of the launch, the case's buffers as T.
template <class T, class Body>
std::string launch_each(const Ctx& c, Body body) {
  Io<T> io(c);
  return msim::launch(c.dims, [&](const msim::Ids& id) { body(io, id); });
}

template <class T, int gs, int bits, int D>
std::string launch_quad(const Ctx& c) {
  return launch_each<T>(c, [&](Io<T>& io, const msim::Ids& id) {
    qmv_quad_impl<T, gs, bits, D>(c.w, io.s, io.b, io.x, io.y, io.K, io.N, id.tg, id.quad_gid, id.quad_lid);
  });
}

template <class T, int gs, int bits>
std::string launch_fast(const Ctx& c) {
  return launch_each<T>(c, [&](Io<T>& io, const msim::Ids& id) {
    qmv_fast_impl<T, gs, bits>(c.w, io.s, io.b, io.x, io.y, io.K, io.N, id.tg, id.simd_gid, id.simd_lid);
  });
}

template <class T, int gs, int bits>
std::string launch_qmv(const Ctx& c) {
  return launch_each<T>(c, [&](Io<T>& io, const msim::Ids& id) {
    qmv_impl<T, gs, bits>(c.w, io.s, io.b, io.x, io.y, io.K, io.N, id.tg, id.simd_gid, id.simd_lid);
  });
}

template <class T, int gs, int bits, int V, int KL>
std::string launch_wide(const Ctx& c) {
  return launch_each<T>(c, [&](Io<T>& io, const msim::Ids& id) {
    qmv_wide_impl<T, gs, bits, V, KL>(c.w, io.s, io.b, io.x, io.y, io.K, io.N, io.M, id.tg, id.simd_gid,
                                      id.simd_lid);
  });
}

// Launchers of the streamed [[kernel]] entries are generated with the unit
// (compile.rs: streamed_launcher), after this file.

extern const Entry kEntries[];
extern const size_t kNumEntries;

using msim::Rng;

template <class T>
uint32_t bits_of(T v) {
  if constexpr (std::is_same_v<T, float>) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  } else {
    return v.bits;
  }
}

template <class T>
T nan_sentinel() {
  if constexpr (std::is_same_v<T, float>) {
    uint32_t u = 0x7fa5a5a5u;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  } else if constexpr (std::is_same_v<T, half>) {
    return half::from_bits(0x7ca5);
  } else {
    return bfloat16_t::from_bits(0x7fa5);
  }
}

struct Args {
  std::string id, key, type;
  int gs, bits, M, N, K;
  msim::Dims dims;
  uint64_t seed;
  char order;
  int record, threads;
};

template <class T>
void run_case(const Args& a, const Entry& e) {
  const int M = a.M, N = a.N, K = a.K, gs = a.gs, bits = a.bits;
  // Rows past N and columns past K exist so that reads a kernel guards only
  // after loading (qmv_quad loads scales before its row check) stay inside
  // the allocation; they hold ordinary quantized data.
  const int Np = (N + 63) / 64 * 64 + 64;
  const int groups = K / gs;
  const int row_bytes = K * bits / 8;
  Rng rng{a.seed * 0x2545f4914f6cdd1dull ^ (uint64_t(M) << 40) ^ (uint64_t(N) << 20) ^
          uint64_t(K) ^ (uint64_t(gs) << 52) ^ (uint64_t(bits) << 60) ^
          (uint64_t(sizeof(T)) << 36) ^ (std::is_same_v<T, bfloat16_t> ? 0x5bd1e995ull : 0)};

  std::vector<T> x(size_t(M) * K + K);
  for (auto& v : x) {
    // Never zero: magnitudes in [1/8, 1), random sign.
    double m = 0.125 + 0.875 * rng.uni();
    v = T(float(rng.next() & 1 ? -m : m));
  }
  std::vector<T> sc(size_t(Np) * groups), bi(size_t(Np) * groups);
  std::vector<uint32_t> wq(size_t(Np) * row_bytes / 4 + 64, 0);
  std::vector<uint8_t> q(size_t(Np) * K);
  auto* wb = reinterpret_cast<uint8_t*>(wq.data());
  const int nbins = (1 << bits) - 1;
  std::vector<double> wf(K);
  for (int n = 0; n < Np; n++) {
    double rs = 0.25 + rng.uni();
    for (int k = 0; k < K; k++) wf[k] = (2 * rng.uni() - 1) * rs;
    for (int g = 0; g < groups; g++) {
      // Affine min/max quantization: w ~ scale * q + bias per group.
      double lo = wf[g * gs], hi = lo;
      for (int k = g * gs; k < (g + 1) * gs; k++) {
        lo = std::min(lo, wf[k]);
        hi = std::max(hi, wf[k]);
      }
      T s = T(float((hi - lo) / nbins));
      T b = T(float(lo));
      sc[size_t(n) * groups + g] = s;
      bi[size_t(n) * groups + g] = b;
      for (int k = g * gs; k < (g + 1) * gs; k++) {
        double v = std::nearbyint((wf[k] - float(b)) / float(s));
        q[size_t(n) * K + k] = uint8_t(std::clamp(v, 0.0, double(nbins)));
      }
    }
    // MLX packs each row as a little-endian bit stream: value k occupies bits
    // [k*bits, (k+1)*bits) of the row (for 2/4/8 bits this is the uint32
    // packing; for 3/5/6 bits the 3- and 5-byte packs).
    uint8_t* row = wb + size_t(n) * row_bytes;
    for (int k = 0; k < K; k++) {
      uint32_t v = q[size_t(n) * K + k];
      for (int bit = 0; bit < bits; bit++) {
        size_t pos = size_t(k) * bits + bit;
        if (v >> bit & 1) row[pos / 8] |= uint8_t(1u << (pos % 8));
      }
    }
  }

  const size_t pad = 256;
  std::vector<T> y(size_t(M) * N + pad, nan_sentinel<T>());
  Ctx c{wq.data(), sc.data(), bi.data(), x.data(), y.data(), K, N, M, a.dims};

  msim::g_cfg.order = a.order == 'l' ? msim::Order::Linear
                      : a.order == 'p' ? msim::Order::Pairwise
                                       : msim::Order::Butterfly;
  msim::g_cfg.record = a.record != 0;
  msim::g_cfg.threads = a.threads != 0;
  msim::g_records.clear();
  std::string err = e.fn(c);

  for (size_t i = size_t(M) * N; i < y.size() && err.empty(); i++) {
    if (bits_of(y[i]) != bits_of(nan_sentinel<T>())) err = "write past the output";
  }
  double max_rel = 0;
  std::ostringstream hex;
  for (int m = 0; m < M; m++) {
    for (int n = 0; n < N; n++) {
      double ref = 0, mag = 0;
      for (int g = 0; g < groups; g++) {
        double s = float(sc[size_t(n) * groups + g]), b = float(bi[size_t(n) * groups + g]);
        for (int k = g * gs; k < (g + 1) * gs; k++) {
          double xv = float(x[size_t(m) * K + k]);
          double wv = s * q[size_t(n) * K + k] + b;
          ref += xv * wv;
          mag += std::fabs(xv) * (std::fabs(s * q[size_t(n) * K + k]) + std::fabs(b));
        }
      }
      T out = y[size_t(m) * N + n];
      double yv = float(out);
      if (std::isnan(yv) && err.empty()) err = "output not written or NaN";
      max_rel = std::max(max_rel, std::fabs(yv - ref) / mag);
      char buf[16];
      std::snprintf(buf, sizeof buf, sizeof(T) == 4 ? "%08x" : "%04x", bits_of(out));
      hex << buf;
    }
  }
  std::ostringstream o;
  o << "{\"id\":\"" << a.id << "\",\"error\":\"" << err << "\",\"rel_err\":" << (std::isfinite(max_rel) ? max_rel : 1e300)
    << ",\"y\":\"" << hex.str() << "\",\"sums\":[";
  for (size_t i = 0; i < msim::g_records.size(); i++) {
    const auto& r = msim::g_records[i];
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s[%u,%u,%u,%d,\"%016llx\"]", i ? "," : "", r.tg.y, r.tg.z,
                  r.sg, r.kind, static_cast<unsigned long long>(r.hash));
    o << buf;
  }
  o << "]}\n";
  std::fputs(o.str().c_str(), stdout);
  std::fflush(stdout);
}

} // namespace msim_harness

int main() {
  using namespace msim_harness;
  std::map<std::string, const Entry*> table;
  for (size_t i = 0; i < kNumEntries; i++) table[kEntries[i].key] = &kEntries[i];
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    Args a{};
    if (!(in >> cmd) || cmd != "case") continue;
    in >> a.id >> a.key >> a.type >> a.gs >> a.bits >> a.M >> a.N >> a.K;
    for (auto& v : a.dims.grid) in >> v;
    for (auto& v : a.dims.group) in >> v;
    in >> a.seed >> a.order >> a.record >> a.threads;
    auto it = table.find(a.key);
    if (!in || it == table.end()) {
      std::printf("{\"id\":\"%s\",\"error\":\"bad case line or unknown kernel key\"}\n", a.id.c_str());
      std::fflush(stdout);
      continue;
    }
    if (a.type == "float32") {
      run_case<float>(a, *it->second);
    } else if (a.type == "float16") {
      run_case<half>(a, *it->second);
    } else {
      run_case<bfloat16_t>(a, *it->second);
    }
  }
  return 0;
}
