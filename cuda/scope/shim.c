/* Stands in for libcudnn.so: a C front that opens its sub-library from its own folder with
 * RTLD_LOCAL on first use, as cudnnCreate opens libcudnn_graph. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int scope_shim_create(void) {
  Dl_info info;
  char path[4096];
  if (!dladdr((void *)&scope_shim_create, &info) || !info.dli_fname) return -1;
  snprintf(path, sizeof path, "%s", info.dli_fname);
  char *slash = strrchr(path, '/');
  snprintf(slash ? slash + 1 : path, sizeof path - (slash ? (size_t)(slash + 1 - path) : 0),
           "libscope_graph.so");
  void *graph = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!graph) return -2;
  int (*init)(void) = (int (*)(void))dlsym(graph, "scope_graph_init");
  return init ? init() : -3;
}
