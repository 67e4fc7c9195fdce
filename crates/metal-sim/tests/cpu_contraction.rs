//! Proof that the CPU row-streamed quantized matmul (overlay 0001-cpu-streamed-qmm-t) keeps
//! the expression boundaries of MLX's row-by-row kernels: `_qmm_t`, `_qmm_t_streamed`,
//! `_qmm_t_simd` and `_qmm_t_simd_streamed` are extracted from the patched tree with
//! metal-sim's extraction machinery, compiled standalone once with `-ffp-contract=off` and
//! once with FMA contraction allowed everywhere (`-ffp-contract=fast`, `-mfma` on x86-64),
//! and every row of every streamed result must equal the same row computed alone, bit for
//! bit, in both builds. ARM64 compilers contract `a*b+c` by default; this is the check that
//! such contraction cannot tell the two kernels apart.
//!
//! `_qmm_t_simd` only runs where MLX has a SIMD type (Apple's Accelerate); here a minimal
//! 8-lane `simd::Simd` stands in for it, so the proof is about the kernels' own expressions.
//!
//! The tree is the project's pin plus its series (`MLX_OVERLAY_ROOT` names another root).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use metal_sim::TreeFiles;
use metal_sim::compile::{Compiler, Contraction};

const CPU_SOURCE: &str = "mlx/backend/cpu/quantized.cpp";
const COMMON: &str = "mlx/backend/common/quantized.h";
const ROOTS: &[&str] = &[
    "_qmm_t",
    "_qmm_t_streamed",
    "_qmm_t_simd",
    "_qmm_t_simd_streamed",
];
/// Helpers the extractor does not take (a macro defined per compiler, a class template and a
/// multi-line variable template); their text is copied from the tree between these markers.
const HELPERS: &[(&str, &str)] = &[(
    "// Whether `scale * w + bias` may be computed once",
    "// C consecutive outputs of R rows of _qmm_t for bits 2, 4 and 8",
)];

fn root() -> PathBuf {
    std::env::var_os("MLX_OVERLAY_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).to_path_buf())
}

fn patched_files() -> TreeFiles {
    use overlay::project::{Project, apply_series};
    let project = Project::load(&root(), &overlay::manifest::Extras::Unread).unwrap();
    let up = project.upstream(None).unwrap();
    let series = project.series(up).unwrap();
    let repo = project
        .open_upstream(up, &overlay::upstream::default_cache_root(), &mut |_| {})
        .unwrap();
    let applied = apply_series(&repo, &up.rev, &series).unwrap();
    let mut files = BTreeMap::new();
    for p in [CPU_SOURCE, COMMON] {
        let bytes = applied
            .result
            .bytes(p, &repo)
            .unwrap()
            .unwrap_or_else(|| panic!("{p} missing from the patched tree"));
        files.insert(p.to_string(), String::from_utf8(bytes).unwrap());
    }
    TreeFiles {
        label: "patched".into(),
        files,
    }
}

fn helpers(src: &str) -> String {
    let mut out = String::new();
    for (from, to) in HELPERS {
        let a = src.find(from).unwrap_or_else(|| {
            panic!("{CPU_SOURCE}: `{from}` not found; is 0001-cpu-streamed-qmm-t in the series?")
        });
        let b = a + src[a..].find(to).expect("end marker after the start");
        out.push_str(&src[a..b]);
    }
    out
}

const PRELUDE: &str = r#"
#include <algorithm>
#include <array>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

// Stand-in for MLX's Accelerate simd types: 8 lanes, lane-wise operators.
namespace mlx::core::simd {
template <typename T>
inline constexpr int max_size = 8;
template <typename T, int N>
struct Simd {
  T value[N];
  Simd() = default;
  template <typename U, typename = std::enable_if_t<std::is_arithmetic_v<U>>>
  Simd(U v) {
    for (int i = 0; i < N; i++) value[i] = static_cast<T>(v);
  }
  template <typename U>
  Simd(Simd<U, N> v) {
    for (int i = 0; i < N; i++) value[i] = static_cast<T>(v.value[i]);
  }
  Simd(Simd<T, N / 2> l, Simd<T, N / 2> r) {
    for (int i = 0; i < N / 2; i++) {
      value[i] = l.value[i];
      value[N / 2 + i] = r.value[i];
    }
  }
};
#define SHIM_OP(op)                                                    \
  template <typename T, int N>                                         \
  Simd<T, N> operator op(Simd<T, N> a, Simd<T, N> b) {                 \
    Simd<T, N> r;                                                      \
    for (int i = 0; i < N; i++) r.value[i] = a.value[i] op b.value[i]; \
    return r;                                                          \
  }                                                                    \
  template <typename T, int N, typename U>                             \
  Simd<T, N> operator op(Simd<T, N> a, U b) {                          \
    return a op Simd<T, N>(static_cast<T>(b));                         \
  }
SHIM_OP(+)
SHIM_OP(*)
SHIM_OP(>>)
SHIM_OP(&)
template <typename T, int N>
Simd<T, N> load(const T* x) {
  Simd<T, N> r;
  for (int i = 0; i < N; i++) r.value[i] = x[i];
  return r;
}
template <typename T, int N>
T sum(Simd<T, N> a) {
  T s = a.value[0];
  for (int i = 1; i < N; i++) s = s + a.value[i];
  return s;
}
} // namespace mlx::core::simd
"#;

/// Runs every (kernel, bits, group) for M = 1..16 and prints one line per case:
/// `<name> <mismatched rows> <hash of the M=16 result>`.
const MAIN: &str = r#"
using namespace mlx::core;

static uint64_t state = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32() {
  state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
  return uint32_t((state * 0x2545F4914F6CDD1Dull) >> 32);
}
static float unit() { return (next_u32() >> 8) / float(1 << 24) * 2.0f - 1.0f; }

template <int bits, int gs, bool simd_kernel>
void run_case(const char* name) {
  const int N = 37, K = 20 * gs, MAXM = 16;  // several K blocks of the vector path
  std::vector<uint32_t> w(N * K * bits / 32);
  for (auto& v : w) v = next_u32();
  std::vector<float> scales(N * K / gs), biases(N * K / gs), x(MAXM * K);
  for (auto& v : scales) v = unit() * 0.1f;
  for (auto& v : biases) v = unit();
  for (auto& v : x) v = unit();
  std::vector<float> alone(MAXM * N), got(MAXM * N);
  auto upstream = [&](float* out, const float* xs, int M) {
    if constexpr (simd_kernel) _qmm_t_simd<float, bits, gs>(out, xs, w.data(), scales.data(), biases.data(), M, N, K);
    else _qmm_t<float, bits, gs>(out, xs, w.data(), scales.data(), biases.data(), M, N, K);
  };
  auto streamed = [&](float* out, int M) {
    if constexpr (simd_kernel) _qmm_t_simd_streamed<float, bits, gs>(out, x.data(), w.data(), scales.data(), biases.data(), M, N, K);
    else _qmm_t_streamed<float, bits, gs>(out, x.data(), w.data(), scales.data(), biases.data(), M, N, K);
  };
  for (int r = 0; r < MAXM; r++) upstream(alone.data() + r * N, x.data() + r * K, 1);
  int bad = 0;
  for (int M = 1; M <= MAXM; M++) {
    streamed(got.data(), M);
    for (int r = 0; r < M; r++) bad += std::memcmp(got.data() + r * N, alone.data() + r * N, N * 4) != 0;
  }
  uint64_t h = 1469598103934665603ull;
  for (float v : alone) { uint32_t b; std::memcpy(&b, &v, 4); h = (h ^ b) * 1099511628211ull; }
  std::printf("%s %d %016llx\n", name, bad, (unsigned long long)h);
}

#define T(bits, gs) run_case<bits, gs, false>("qmm_t/" #bits "/" #gs);
#define S(bits, gs) run_case<bits, gs, true>("qmm_t_simd/" #bits "/" #gs);
int main() {
  T(2, 32) T(2, 64) T(2, 128) T(3, 32) T(3, 64) T(3, 128) T(4, 32) T(4, 64) T(4, 128)
  T(5, 32) T(5, 64) T(5, 128) T(6, 32) T(6, 64) T(6, 128) T(8, 32) T(8, 64) T(8, 128)
  S(4, 32) S(4, 64) S(4, 128) S(8, 32) S(8, 64) S(8, 128)
  return 0;
}
"#;

/// (case, mismatched rows, hash of the row-by-row results) for one contraction mode.
fn run_mode(unit: &str, mode: Contraction) -> Vec<(String, u64, String)> {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cpu-contraction");
    let compiler = Compiler::detect(&cache).unwrap();
    let mut flags = mode.flags();
    flags.push("-O2".into());
    let bin = compiler.build(unit, &flags).unwrap();
    let out = Command::new(&bin.path).output().unwrap();
    assert!(
        out.status.success(),
        "{mode:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].parse().unwrap(), f[2].to_string())
        })
        .collect()
}

#[test]
fn streamed_kernels_are_bit_identical_with_and_without_contraction() {
    let files = patched_files();
    let code = metal_sim::extract::extract(
        &files,
        &[CPU_SOURCE, COMMON],
        ROOTS,
        &[],
        &["MLX_QMM_T_UNROLL", "qmm_t_lanes", "qmm_t_hoist_weight"],
    )
    .unwrap_or_else(|e| panic!("{e:#}; is 0001-cpu-streamed-qmm-t in the series?"));
    for r in ROOTS {
        assert!(code.names.iter().any(|n| n == r), "{r} not extracted");
    }
    let unit = format!(
        "{PRELUDE}namespace mlx::core {{\n{}}} // namespace mlx::core\n{}\n{MAIN}",
        helpers(files.get(CPU_SOURCE).unwrap()),
        code.code
    );
    let off = run_mode(&unit, Contraction::Off);
    let on = run_mode(&unit, Contraction::On);
    assert_eq!(off.len(), 24);
    assert_eq!(on.len(), 24);
    for (name, bad, _) in off.iter().chain(&on) {
        assert_eq!(
            *bad, 0,
            "{name}: rows differ from the same row computed alone"
        );
    }
    // Not vacuous: allowing contraction changes the row-by-row results themselves, so fma
    // was really used, and the streamed kernels followed it bit for bit.
    let changed = off.iter().zip(&on).filter(|(a, b)| a.2 != b.2).count();
    assert!(
        changed >= 20,
        "contraction changed only {changed} of 24 cases"
    );
}
