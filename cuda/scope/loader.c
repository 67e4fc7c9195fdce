/* Opens a module as Python opens an extension (RTLD_NOW | RTLD_LOCAL), or RTLD_GLOBAL, and runs
 * scope_core_run(FIX). A C program: libstdc++ is not in its global scope, as in python3.
 *   loader MODULE local|global FIX */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: loader MODULE local|global FIX\n");
    return 2;
  }
  int mode = RTLD_NOW | (strcmp(argv[2], "global") == 0 ? RTLD_GLOBAL : RTLD_LOCAL);
  void *m = dlopen(argv[1], mode);
  if (!m) {
    fprintf(stderr, "loader: %s\n", dlerror());
    return 2;
  }
  int (*run)(const char *) = (int (*)(const char *))dlsym(m, "scope_core_run");
  if (!run) {
    fprintf(stderr, "loader: no scope_core_run in %s\n", argv[1]);
    return 2;
  }
  run(argv[3]);
  return 0;
}
