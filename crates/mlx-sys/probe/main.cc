// The exactness probe as a program, for builds without Rust (the CUDA bundle's exactness.sh):
//
//   exactness POLICY [SPEC]
//
// POLICY (upstream, streamed or invariant: CUDA's third qmv policy) only labels the run: the
// caller sets the policy switches
// (MLX_CUDA_QMV_BATCH_POLICY, MLX_CPU_QMM_T_POLICY) in the environment before MLX starts.
// SPEC is exactness.h's "key=value;..." options. Prints one JSON line in the shape of
// mlx-sys's exactness example ({"policy", "paths": null, "env": {the kernel settings set},
// "probe": {...}}; values are plain words, printed as they are), which
// `cargo xtask exactness --from FILE` renders. Exit 2 on bad arguments or an error. Built with
// CUPTI (PROBE_CUPTI, gpu_time.cc), the timing rows also give the forward's GPU time.
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "exactness.h"

#ifdef PROBE_CUPTI
void install_gpu_time();  // gpu_time.cc
#endif

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: exactness upstream|streamed|invariant ['key=value;...']\n";
    return 2;
  }
  std::string policy = argv[1];
  if (policy != "upstream" && policy != "streamed" && policy != "invariant") {
    std::cerr << "exactness: policy must be upstream, streamed or invariant, got '" << policy
              << "'\n";
    return 2;
  }
  try {
    auto opts = exactness::parse_options(argc == 3 ? argv[2] : "");
#ifdef PROBE_CUPTI
    // The timing rows' GPU columns (CUPTI's tracing on for the whole run); PROBE_GPU_TIME=0: off,
    // unset or 1: on, anything else an error. CUPTI refusing to start costs the columns only,
    // said on stderr: the rows say it too, by lacking them.
    const char* gpu_time = std::getenv("PROBE_GPU_TIME");
    std::string gt = gpu_time ? gpu_time : "1";
    if (gt != "0" && gt != "1") {
      throw std::invalid_argument("PROBE_GPU_TIME must be 0 or 1, not '" + gt + "'");
    }
    if (gt == "1") {
      try {
        install_gpu_time();
      } catch (const std::exception& e) {
        std::cerr << "exactness: no GPU time in the timing rows: " << e.what() << "\n";
      }
    }
#endif
    std::ostringstream probe;
    exactness::run(opts, probe);
    std::string json = probe.str();
    while (!json.empty() && json.back() == '\n') json.pop_back();
    std::cout << "{\"policy\":\"" << policy << "\",\"paths\":null,\"env\":{";
    // The settings that choose MLX's kernels, as this process saw them.
    const char* names[] = {"MLX_CUDA_QMV_BATCH_POLICY", "MLX_CPU_QMM_T_POLICY",
                           "MLX_CUDA_QMV_WGMMA", "MLX_CUDA_QMV_WGMMA_PDL",
                           "MLX_CUDA_USE_CUDNN_SDPA",
                           "MLX_USE_CUDA_GRAPHS", "PROBE_GPU_TIME"};
    bool first = true;
    for (const char* n : names) {
      const char* v = std::getenv(n);
      if (!v) continue;
      std::cout << (first ? "" : ",") << "\"" << n << "\":\"" << v << "\"";
      first = false;
    }
    std::cout << "},\"probe\":" << json << "}" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
