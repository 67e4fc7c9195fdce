// Driver for the dispatch binary. Included by the generated translation unit
// after the host functions extracted from mlx/backend/metal/quantized.cpp.
//
// stdin, one request per line:
//   align BITS                                -> qmv_fast_k_alignment(BITS)
//   dispatch ID ENTRY TYPE GS BITS M N K ARCH -> what ENTRY would launch
// ENTRY is one of MLX's host functions: dispatch_qmv (MLX's own choice),
// or qmv / qmv_wide / qmv_quad called directly (to force a kernel family).

int main() {
  using namespace mlx::core;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    if (!(in >> cmd)) continue;
    if (cmd == "align") {
      int bits = 0;
      in >> bits;
      std::printf("{\"bits\":%d,\"align\":%d}\n", bits, qmv_fast_k_alignment(bits));
      continue;
    }
    std::string id, entry, type, arch;
    int gs = 0, bits = 0, M = 0, N = 0, K = 0;
    in >> id >> entry >> type >> gs >> bits >> M >> N >> K >> arch;
    array x{type, size_t(M) * K}, w{"uint32", size_t(N) * K * bits / 32};
    array scales{type, size_t(N) * K / gs}, out{type, size_t(M) * N};
    std::optional<array> biases = scales;
    metal::Device d{arch};
    Stream s;
    const std::string mode = "affine";
    g_launch = Launch{};
    if (entry == "dispatch_qmv") {
      dispatch_qmv(x, w, scales, biases, std::nullopt, out, gs, bits, M, N, K, d, s, mode);
    } else if (entry == "qmv") {
      qmv(x, w, scales, biases, std::nullopt, out, gs, bits, M, N, K, d, s, mode);
    } else if (entry == "qmv_wide") {
      qmv_wide(x, w, scales, biases, out, gs, bits, M, N, K, d, s, mode);
    } else if (entry == "qmv_quad") {
      qmv_quad(x, w, scales, biases, out, gs, bits, M, N, K, d, s, mode);
    }
    std::ostringstream o;
    o << "{\"id\":\"" << id << "\",\"func\":\"" << g_launch.func << "\",\"kname\":\""
      << g_launch.kname << "\",\"dispatches\":" << g_launch.dispatches << ",\"targs\":[";
    for (size_t i = 0; i < g_launch.targs.size(); i++) o << (i ? "," : "") << g_launch.targs[i];
    o << "],\"grid\":[" << g_launch.grid[0] << "," << g_launch.grid[1] << "," << g_launch.grid[2]
      << "],\"group\":[" << g_launch.group[0] << "," << g_launch.group[1] << ","
      << g_launch.group[2] << "],\"bytes\":[";
    for (size_t i = 0; i < g_launch.bytes.size(); i++) {
      o << (i ? "," : "") << "[" << g_launch.bytes[i].first << "," << g_launch.bytes[i].second << "]";
    }
    o << "]}\n";
    std::fputs(o.str().c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}
