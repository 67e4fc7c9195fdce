// Stands in for MLX's Python extension: a module whose dependencies are the interposer, the C
// front (or cuDNN itself with -DSCOPE_CUDNN) and libstdc++, opened by its host with RTLD_LOCAL.
// FIX names what runs before the front's first call:
//   none   nothing
//   front  the front's library made global (RTLD_NOLOAD | RTLD_GLOBAL) and its sub-library
//          opened RTLD_GLOBAL: the first workaround (overlay 0011 as first written), which the H200
//          showed not to help
//   self   the object holding this code made global with its dependencies, in its own order:
//          overlay 0011 in its second form (dropped since: overlay 0012 removes the cause)
#include <dlfcn.h>
#include <cstdio>
#include <cstring>
#include <string>

#ifdef SCOPE_CUDNN
extern "C" int cudnnCreate(void**);
static int front() {
  void* handle = nullptr;
  return cudnnCreate(&handle);  // without a GPU: CUDNN_STATUS_NOT_INITIALIZED, after its setup
}
static void* front_symbol() { return reinterpret_cast<void*>(&cudnnCreate); }
static const char* sub_library = "libcudnn_graph.so.9";
#else
extern "C" int scope_shim_create();
static int front() { return scope_shim_create(); }
static void* front_symbol() { return reinterpret_cast<void*>(&scope_shim_create); }
static const char* sub_library = "libscope_graph.so";
#endif

static void make_global(void* addr, const char* sibling) {
  Dl_info info;
  if (!dladdr(addr, &info) || !info.dli_fname) return;
  dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (sibling) {
    std::string p = info.dli_fname;
    p = p.substr(0, p.rfind('/') + 1) + sibling;
    dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
}

extern "C" int scope_core_run(const char* fix) {
  if (std::strcmp(fix, "front") == 0) {
    make_global(front_symbol(), sub_library);
  } else if (std::strcmp(fix, "self") == 0) {
    make_global(reinterpret_cast<void*>(&scope_core_run), nullptr);
  }
  int r = front();
  std::printf("front returned %d\n", r);
  return r;
}
