// What MLX's own code has (libmlx's device, load, ring and scheduler objects on the H200): a
// std::call_once of its own. In a module linked with -static-libstdc++ it pulls libstdc++.a's
// mutex.o in, which defines std::__once_call and __once_proxy, exported unless the link hides
// the archives' symbols (--exclude-libs,ALL: overlay 0012).
#include <mutex>

extern "C" int scope_once() {
  static std::once_flag flag;
  static int n = 0;
  std::call_once(flag, [] { n = 1; });
  return n;
}
