// The block-vs-chain exactness probe (`cargo xtask exactness`, docs/kernels/exactness.md).
//
// Written once against MLX's public C++ API: linked through the mlx-sys bridge for the CPU
// build, and compiled with main.cc into a standalone program by the CUDA bundle. It measures
// and reports; which rows a policy promises is decided by the caller (Rust renders the JSON
// and owns the promise table), so the probe never judges its own results.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace exactness {

// Decoder dimensions (a Llama/Qwen-shaped model with GQA and 4-bit affine weights).
struct Dims {
  int vocab = 0;
  int d_model = 0;
  int layers = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int mlp = 0;
  float rope_base = 10000.0f;
  float eps = 1e-6f;
  int bits = 4;
  int group_size = 64;
};

struct Options {
  // Which parts to run.
  bool ops = true;
  bool decoder = true;
  // Op table: T = 1..t_max rows, for each seed in 0..seeds-1.
  int t_max = 32;
  int seeds = 2;
  // KV lengths (before the block) of the SDPA rows.
  std::vector<int> kv_lens = {64, 512, 4096};
  // Decoder: preset name (for the report), dims, prompt length, verify blocks k = 2..k_max.
  std::string preset = "small";
  Dims dims;
  int prompt = 40;
  int k_max = 16;
  uint64_t seed = 0;
  // "bf16", "f16" or "f32": the decoder's activation and unquantized weight type.
  std::string dtype = "bf16";
  // The LM head as a dense (unquantized) matmul instead of a quantized one.
  bool dense_head = false;
  // An MLX-format checkpoint's safetensors files ("checkpoint=a|b"): the decoder's weights,
  // under mlx-lm's names, instead of the seeded ones; dims come from its config.json (read by
  // the caller and passed as options). The report's preset is then "checkpoint".
  std::vector<std::string> checkpoint;
  // The op table's ops to run (empty: all), by the names the report uses.
  std::vector<std::string> only;
  // The decoder's KV cache: "concat" (grown by concatenation) or "step" (mlx-lm's KVCache:
  // a buffer grown in steps of 256 rows, written with slice_update and read as a slice of it,
  // which MLX's CUDA backend serves with cuDNN's decode path at 256 keys and more).
  std::string cache = "concat";
  // Decoder timing: the median of `timing` forwards of k = 1, 4, 8, 16 tokens (k <= k_max) from
  // the prompt's cache, and of the attention op alone at the decoder's shapes (0: off).
  int timing = 0;
  // Where a timed forward's token ids live: "device" (made once before the repetitions, in
  // device memory, as a decoder's drafted tokens come from its own kernels) or "host" (an array
  // built from host data in every repetition: MLX's CUDA allocator puts it in managed memory,
  // and more than 8 bytes of it (k >= 3) are not in the pool the device is advised to access).
  std::string tokens = "device";
  // A negative control: flip the lowest bit of the first chain row's first element before
  // comparing, so every comparison must report a difference (shows the check can fail).
  bool perturb = false;
  // The decoder's digests also of every tap (each op's output, layer by layer) of the prompt's
  // forward and of each classic decode step: where two processes' runs part, to the op.
  bool tap_digests = false;
  // repeat=N: the prompt's forward (from an empty cache) and the first classic decode step (from
  // the prompt's cache) run N more times in this process, each one's taps digested (implies
  // taps=1): a kernel whose bits follow timing or placement parts them from the first. With
  // perturb=1, each repeat's first tap has its lowest bit flipped before its digest (the
  // control: every repeat must then differ).
  int repeat = 0;
};

// What the GPU did while one piece of work ran: the time at least one kernel, copy or set was
// running, the part of it in quantized-matmul kernels (names with "qmv" or "qmm"), how many
// kernels ran, the time with each CUDA graph launch taken whole (its first start to its last
// end: the gaps between its kernels counted) and how many graph launches there were;
// `by_kernel`: each kernel name's summed time (milliseconds, the longest first, at most
// kByKernel names and then "(others)") and launches, where the time goes.
struct KernelTime {
  std::string name;
  double ms = 0;
  long launches = 0;
};
struct GpuTime {
  double busy_ms = 0;
  double qmm_ms = 0;
  long kernels = 0;
  double graph_ms = 0;
  long graphs = 0;
  std::vector<KernelTime> by_kernel;
};
constexpr size_t kByKernel = 12;

// Runs its argument (which evaluates its work) and reports what the GPU did meanwhile.
using GpuMeter = std::function<GpuTime(const std::function<void()>&)>;

// Where the program can measure the GPU (the CUDA probe with CUPTI, gpu_time.cc), the timing
// rows gain its columns; unset (the bridge, a build without CUPTI), they have none.
void set_gpu_meter(GpuMeter meter);

// Runs the probe and writes one JSON object (docs/json.md, "exactness" raw results) to out.
// Throws std::exception on bad options.
void run(const Options& opts, std::ostream& out);

// Writes the seeded decoder of `opts` to `file` (safetensors, mlx-lm's names): a checkpoint for
// testing the checkpoint mode. config.json is the caller's to write.
void write_checkpoint(const Options& opts, const std::string& file);

// Parses "key=value;key=value" (the bridge's and main.cc's shared option syntax). Unknown
// keys throw std::invalid_argument naming the key.
Options parse_options(const std::string& spec);

} // namespace exactness
