// SIMT scheduler for metal_shim.h: coroutine lanes (default) or OS-thread
// lanes meeting at a barrier (cross-check of the coroutine scheduler).
#pragma once
#include "metal_shim.h"

namespace msim {

constexpr size_t kStack = 256 * 1024;
inline std::vector<std::vector<char>> g_stacks;
inline const std::function<void(const Ids&)>* g_fn = nullptr;
inline thread_local std::barrier<std::function<void()>>* t_barrier = nullptr;

inline Ids lane_ids(const Ids& base, int lane) {
  Ids id = base;
  id.simd_lid = lane;
  uint32_t flat = base.simd_gid * 32 + lane;
  id.quad_gid = flat / 4;
  id.quad_lid = lane % 4;
  return id;
}

inline void exchange(int kind, long arg, const std::type_info& ty, const void* in,
                     void* out, Combine c) {
  Lane& l = t_group->lanes[t_lane];
  l.post = Post{kind, arg, &ty, in, out, c};
  l.waiting = true;
  if (t_barrier) {
    t_barrier->arrive_and_wait();
  } else {
    swapcontext(&l.ctx, &g_sched);
  }
}

inline void lane_entry() {
  Group* g = t_group;
  int lane = t_lane;
  (*g_fn)(lane_ids(g->base, lane));
  g->lanes[lane].done = true;
  // uc_link returns to the scheduler.
}

inline std::string run_simdgroup_coroutines(Group& g, const std::function<void(const Ids&)>& f) {
  if (g_stacks.empty()) g_stacks.assign(32, std::vector<char>(kStack));
  g_fn = &f;
  t_group = &g;
  t_barrier = nullptr;
  for (int i = 0; i < 32; i++) {
    Lane& l = g.lanes[i];
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = g_stacks[i].data();
    l.ctx.uc_stack.ss_size = kStack;
    l.ctx.uc_link = &g_sched;
    makecontext(&l.ctx, lane_entry, 0);
  }
  for (;;) {
    bool any = false;
    for (int i = 0; i < 32; i++) {
      Lane& l = g.lanes[i];
      if (l.done) continue;
      any = true;
      t_lane = i;
      swapcontext(&g_sched, &l.ctx);
    }
    if (!any) break;
    g.complete();
  }
  return g.error;
}

inline std::string run_simdgroup_threads(Group& g, const std::function<void(const Ids&)>& f) {
  std::function<void()> on_phase = [&g]() { g.complete(); };
  std::barrier<std::function<void()>> bar(32, on_phase);
  std::vector<std::thread> ts;
  for (int i = 0; i < 32; i++) {
    ts.emplace_back([&, i]() {
      t_group = &g;
      t_lane = i;
      t_barrier = &bar;
      f(lane_ids(g.base, i));
      g.lanes[i].done = true;
      bar.arrive_and_drop();
      t_barrier = nullptr;
      t_group = nullptr;
    });
  }
  for (auto& t : ts) t.join();
  return g.error;
}

inline std::string run_simdgroup(const Ids& base, const std::function<void(const Ids&)>& f) {
  // Fresh lane state per simdgroup: nothing leaks from one launch to the next.
  Group g;
  g.base = base;
  return g_cfg.threads ? run_simdgroup_threads(g, f) : run_simdgroup_coroutines(g, f);
}

struct Dims {
  uint32_t grid[3];
  uint32_t group[3];
};

// Threadgroups and their simdgroups run one after another: the kernels under
// test share nothing through threadgroup memory.
inline std::string launch(const Dims& d, const std::function<void(const Ids&)>& f) {
  uint32_t threads = d.group[0] * d.group[1] * d.group[2];
  if (threads % 32 != 0) return "threadgroup size not a multiple of 32";
  for (uint32_t z = 0; z < d.grid[2]; z++)
    for (uint32_t y = 0; y < d.grid[1]; y++)
      for (uint32_t x = 0; x < d.grid[0]; x++)
        for (uint32_t sg = 0; sg < threads / 32; sg++) {
          Ids base{};
          base.tg = uint3{x, y, z};
          base.simd_gid = sg;
          std::string e = run_simdgroup(base, f);
          if (!e.empty()) return e;
        }
  return "";
}

} // namespace msim

// Address spaces and function qualifiers vanish on the CPU: every buffer is
// ordinary memory and every lane has its own stack.
#define device
#define thread
#define threadgroup
#define constant
#define METAL_FUNC inline
