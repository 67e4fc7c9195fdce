// Every standard header the emulator or the extracted code needs, included
// BEFORE metal_shim.h defines `thread`, `device`, ... away: defining `thread`
// first would break std::thread and friends.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <typeinfo>
#include <vector>
#include <ucontext.h>
