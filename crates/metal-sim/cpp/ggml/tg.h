// Threadgroup scheduler for ggml's kernels: every thread of a threadgroup is a
// ucontext coroutine; simdgroups are 32 consecutive threads (a partial last
// simdgroup has its missing lanes marked exited). A thread runs until it
// reaches a simdgroup collective (posted to msim::Group, metal_shim.h) or a
// threadgroup_barrier. A collective completes when every live lane of its
// simdgroup has posted; a barrier opens when every thread of the threadgroup
// has reached it. Anything else (a lane at a barrier while its simdgroup
// waits in a collective, a barrier some threads already left the kernel
// before reaching) is reported, never papered over. Threadgroups run one
// after another (ggml's kernels share nothing across threadgroups).
#pragma once
#include "shim.h"

namespace msim::tg {

struct ThreadIds {
  uint3 tgpig;    // threadgroup_position_in_grid
  ushort3 tpitg;  // thread_position_in_threadgroup
  ushort3 ntg;    // threads_per_threadgroup
  ushort tiitg;   // thread_index_in_threadgroup
  ushort tiisg;   // thread_index_in_simdgroup
  ushort sgitg;   // simdgroup_index_in_threadgroup
  char* shmem;    // [[threadgroup(0)]]: the launch's bytes, fresh per threadgroup
};

using Body = std::function<void(const ThreadIds&)>;

struct Tg {
  std::vector<Group> groups;
  std::vector<char> at_barrier;
  std::vector<ThreadIds> ids;
  const Body* body = nullptr;
  std::string error;
  uint64_t barriers = 0;
};

inline Tg* t_tg = nullptr;
inline int t_flat = 0;
constexpr size_t kTgStack = 128 * 1024;
inline std::vector<std::vector<char>> g_tg_stacks;

inline Lane& lane_of(Tg& t, int f) { return t.groups[f / 32].lanes[f % 32]; }

inline void thread_entry() {
  Tg* t = t_tg;
  int f = t_flat;
  (*t->body)(t->ids[f]);
  lane_of(*t, f).done = true;
}

// One pass of the decision: complete collectives, else open a barrier.
inline bool advance(Tg& t, int n) {
  bool progressed = false;
  for (size_t sg = 0; sg < t.groups.size(); sg++) {
    Group& g = t.groups[sg];
    int waiting = 0, barrier = 0;
    for (int l = 0; l < 32; l++) {
      int f = int(sg) * 32 + l;
      if (g.lanes[l].waiting) waiting++;
      if (f < n && t.at_barrier[f]) barrier++;
    }
    if (waiting == 0) continue;
    if (barrier > 0) {
      if (t.error.empty()) t.error = "simdgroup " + std::to_string(sg) + ": some lanes at a threadgroup barrier, others in a simdgroup op";
      return false;
    }
    g.complete();
    if (!g.error.empty() && t.error.empty()) t.error = g.error;
    progressed = true;
  }
  if (progressed) return true;
  int live = 0, barrier = 0, exited = 0;
  for (int f = 0; f < n; f++) {
    if (lane_of(t, f).done) {
      exited++;
      continue;
    }
    live++;
    if (t.at_barrier[f]) barrier++;
  }
  if (live == 0) return false;
  if (barrier != live || exited > 0) {
    if (t.error.empty()) t.error = "threadgroup barrier reached by " + std::to_string(barrier) + " of " + std::to_string(n) + " threads (" + std::to_string(exited) + " exited)";
    return false;
  }
  for (int f = 0; f < n; f++) t.at_barrier[f] = 0;
  t.barriers++;
  return true;
}

inline std::string run_threadgroup(uint3 tgpig, ushort3 ntg, size_t smem, const Body& body,
                                   uint64_t* barriers) {
  int n = int(ntg.x) * ntg.y * ntg.z;
  // Threadgroup memory starts as a NaN pattern (0x7fc0 halves, 0x7fc07fc0
  // floats), so a value read before any thread wrote it shows up.
  std::vector<char> mem(smem + 16);
  for (size_t i = 0; i + 1 < mem.size(); i += 2) {
    mem[i] = char(0xc0);
    mem[i + 1] = char(0x7f);
  }
  int nsg = (n + 31) / 32;
  Tg t;
  t.groups.resize(nsg);
  t.at_barrier.assign(n, 0);
  t.body = &body;
  if (g_tg_stacks.size() < size_t(n)) g_tg_stacks.resize(n, std::vector<char>(kTgStack));
  for (int sg = 0; sg < nsg; sg++) {
    t.groups[sg].base.tg = tgpig;
    t.groups[sg].base.simd_gid = sg;
    for (int l = 0; l < 32; l++)
      if (sg * 32 + l >= n) t.groups[sg].lanes[l].done = true;
  }
  for (int f = 0; f < n; f++) {
    ThreadIds id;
    id.tgpig = tgpig;
    id.ntg = ntg;
    id.tpitg = ushort3(ushort(f % ntg.x), ushort((f / ntg.x) % ntg.y), ushort(f / (ntg.x * ntg.y)));
    id.tiitg = ushort(f);
    id.tiisg = ushort(f % 32);
    id.sgitg = ushort(f / 32);
    id.shmem = smem ? mem.data() : nullptr;
    t.ids.push_back(id);
    Lane& l = lane_of(t, f);
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = g_tg_stacks[f].data();
    l.ctx.uc_stack.ss_size = kTgStack;
    l.ctx.uc_link = &g_sched;
    makecontext(&l.ctx, thread_entry, 0);
  }
  t_tg = &t;
  for (;;) {
    for (int f = 0; f < n; f++) {
      Lane& l = lane_of(t, f);
      if (l.done || l.waiting || t.at_barrier[f]) continue;
      t_flat = f;
      t_group = &t.groups[f / 32];
      t_lane = f % 32;
      swapcontext(&g_sched, &l.ctx);
    }
    if (!advance(t, n)) break;
  }
  t_tg = nullptr;
  t_group = nullptr;
  if (barriers) *barriers += t.barriers;
  if (t.error.empty()) {
    for (int f = 0; f < n; f++)
      if (!lane_of(t, f).done) return "threadgroup ended with threads still waiting";
  }
  return t.error;
}

struct Launch {
  uint32_t grid[3];
  uint32_t group[3];
  size_t smem = 0;  // threadgroup memory bytes (set_threadgroup_memory_size)
};

inline std::string launch(const Launch& d, const Body& body, uint64_t* barriers = nullptr) {
  for (uint32_t z = 0; z < d.grid[2]; z++)
    for (uint32_t y = 0; y < d.grid[1]; y++)
      for (uint32_t x = 0; x < d.grid[0]; x++) {
        std::string e = run_threadgroup(uint3{x, y, z},
                                        ushort3(ushort(d.group[0]), ushort(d.group[1]), ushort(d.group[2])),
                                        d.smem, body, barriers);
        if (!e.empty()) return e;
      }
  return "";
}

}  // namespace msim::tg

namespace metal {
inline void threadgroup_barrier(mem_flags) {
  msim::tg::Tg* t = msim::tg::t_tg;
  if (!t) {
    std::fprintf(stderr, "threadgroup_barrier outside a threadgroup launch\n");
    std::abort();
  }
  int f = msim::tg::t_flat;
  t->at_barrier[f] = 1;
  msim::Lane& l = msim::tg::lane_of(*t, f);
  swapcontext(&l.ctx, &msim::g_sched);
  // Resumed by the scheduler: restore this thread's identity.
  msim::tg::t_flat = f;
}
}  // namespace metal
