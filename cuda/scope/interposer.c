/* A library that defines libstdc++'s thread-local std::call_once slots (std::__once_call,
 * std::__once_callable) under libstdc++'s own symbol version: any library that statically carries
 * those libstdc++ objects with their symbols exported does. Standing before libstdc++ in a
 * module's lookup scope, it takes libstdc++'s own references to them. */
__thread void (*scope_once_call)(void) __asm__("_ZSt11__once_call");
__thread void *scope_once_callable __asm__("_ZSt15__once_callable");
