// Stands in for libcudnn_graph: a library its front library opens itself (RTLD_LOCAL) and whose
// one-time setup goes through std::call_once, as cudnn::graph::LibraryConfig::init does.
#include <mutex>

namespace {
std::once_flag flag;
int state = 0;
} // namespace

extern "C" int scope_graph_init() {
  std::call_once(flag, [] { state = 42; });
  return state;
}
