// Just enough of MLX's host-side types for the dispatch functions extracted
// from mlx/backend/metal/quantized.cpp to run: instead of encoding Metal
// commands they record what would be launched (kernel, template arguments,
// grid and threadgroup sizes, constant bytes).
#pragma once
#include "metal_std.h"

namespace MTL {
struct Size {
  size_t width, height, depth;
  Size(size_t w, size_t h, size_t d) : width(w), height(h), depth(d) {}
};
} // namespace MTL

namespace mlx::core {

struct array {
  std::string type;
  size_t n = 0;
  const std::string& dtype() const { return type; }
  size_t size() const { return n; }
};
struct Stream {};

inline std::string get_type_string(const std::string& t) { return t; }

// Dtypes compare as their names (array::dtype() is the name here).
inline const std::string float32 = "float32";
inline const std::string float16 = "float16";
inline const std::string bfloat16 = "bfloat16";

// MLX's environment knobs, read from the real environment so the runner can
// choose a policy per process.
namespace env {
inline std::string get_var(const char* name, const char* default_value) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string(default_value);
}
inline int get_var(const char* name, int default_value) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : default_value;
}
} // namespace env

template <class... A>
void concatenate(std::string& out, const A&... a) {
  std::ostringstream s;
  ((s << a), ...);
  out += s.str();
}

struct Launch {
  std::string func, kname;
  std::vector<long> targs;
  long grid[3] = {0, 0, 0};
  long group[3] = {0, 0, 0};
  std::vector<std::pair<int, long>> bytes;
  int dispatches = 0;
};
inline Launch g_launch;

struct Kernel {};

namespace metal {
struct Device {
  std::string arch;
  std::string get_architecture() const { return arch; }
  int get_architecture_gen() const {
    // "applegpu_g15s" -> 15, the same digits MLX's Device parses.
    size_t g = arch.rfind("_g");
    return g == std::string::npos ? 0 : std::atoi(arch.c_str() + g + 2);
  }
};
struct CommandEncoder {
  void set_compute_pipeline_state(Kernel) {}
  void set_input_array(const array&, int) {}
  void set_output_array(const array&, int) {}
  template <class T>
  void set_bytes(const T& v, int idx) {
    g_launch.bytes.push_back({idx, static_cast<long>(v)});
  }
  void dispatch_threadgroups(const MTL::Size& grid, const MTL::Size& group) {
    g_launch.grid[0] = grid.width;
    g_launch.grid[1] = grid.height;
    g_launch.grid[2] = grid.depth;
    g_launch.group[0] = group.width;
    g_launch.group[1] = group.height;
    g_launch.group[2] = group.depth;
    g_launch.dispatches++;
  }
};
inline CommandEncoder g_encoder;
inline CommandEncoder& get_command_encoder(const Stream&) { return g_encoder; }
} // namespace metal

template <class... A>
Kernel get_quantized_kernel_wrapped(metal::Device&, const std::string& name,
                                    const std::string& func, const std::string&,
                                    const std::string&, int group_size, int bits,
                                    A... args) {
  g_launch.func = func;
  g_launch.kname = name;
  g_launch.targs = {group_size, bits, static_cast<long>(args)...};
  return {};
}

// Batch strides only matter for B > 1, which the harness never launches.
template <class... A>
int add_strides_and_shapes(metal::CommandEncoder&, bool, const A&...) {
  return 0;
}

} // namespace mlx::core
