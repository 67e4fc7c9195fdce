// Synthetic C++/Metal: namespaces, templates, classes, macros, preprocessor branches.
#include <metal_stdlib>
#define KERNEL(name, T) \
  template [[host_name(#name)]] [[kernel]] void name<T>();
namespace ns { namespace {
template <typename T, int N = 4>
struct Loader {
  T v[N];
  void load(const device T* p) { for (int i = 0; i < N; i++) { v[i] = p[i]; } }
  Loader() = default;
  ~Loader() {}
};
} // namespace
#if 0
void dead() { }
#elif defined(X)
void alive_else() { }
#else
void other() { "}" ; '{'; /* } */ }
#endif
template <typename T>
[[kernel]] void qmv(const device T* w [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
  auto f = [&](int x) { return x + 1; };
  R"(raw } string)";
}
enum class E : int { A, B };
union U { int i; float f; };
int Loader<float, 4>::operator()(int a) const { return a; }
} // namespace ns
extern "C" { int c_fn(void) { return 0; } }
