// The GPU's own time of a piece of work, for the CUDA probe (compiled where CMake finds CUPTI:
// CMakeLists.txt). A decoder forward's wall time is mostly the host's (building MLX's graph,
// launching): what verification costs the GPU is what its kernels, copies and sets took.
//
// CUPTI's activity API records each kernel's, memcpy's and memset's start and end on the GPU
// (graph-launched kernels too); tracing starts once, before MLX touches the device, so the
// graphs MLX instantiates and replays are traced from their first launch. A measurement drops
// the records before it, runs the work, synchronizes the device, flushes, and joins the
// intervals: `busy_ms` is their union (time with at least one running), `qmm_ms` the union of
// the kernels whose names contain "qmv" or "qmm" (MLX's quantized matmuls, the overlays'
// included), `graph_ms` the union again with each CUDA graph launch's records taken whole, from
// its first start to its last end (a record's correlation ID is that of the API call that
// launched it: one cudaGraphLaunch for all of a graph's nodes), so the gaps between a graph's
// kernels count and the gaps between launches (the host's) do not; `graphs` how many launches;
// `by_kernel` each kernel name's summed duration and launches (demangled, template arguments
// and parameters cut: "mlx::core::cu::qmv_wgmma_kernel"), the longest first.
// Records CUPTI dropped make the measurement an error, not a smaller number.
#include <cupti.h>
#include <cuda_runtime_api.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "exactness.h"

namespace {

struct Span {
  uint64_t start, end;
  bool kernel, qmm;
  uint32_t graph;  // the graph that launched it, 0 outside graphs
  uint32_t corr;   // the correlation ID of the launching API call
  int name;        // a kernel's index in `names`; -1 for copies and sets
};

std::mutex mu;
std::vector<Span> spans;
std::vector<std::string> names;
std::map<std::string, int> name_ids;

// A kernel's name as a reader knows it: demangled, without its return type, template arguments
// or parameters.
std::string short_name(const char* mangled) {
  if (!mangled) return "(unnamed)";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string n = status == 0 && d ? d : mangled;
  std::free(d);
  for (size_t at; (at = n.find("(anonymous namespace)")) != std::string::npos;) {
    n.replace(at, 21, "{anon}");
  }
  n = n.substr(0, n.find_first_of("<("));
  const size_t space = n.rfind(' ');
  return space == std::string::npos ? n : n.substr(space + 1);
}

// Under mu. Each mangled name is demangled once (a forward launches the same few hundred kernels
// in every repetition).
int name_id(const char* mangled) {
  static std::map<std::string, int> seen;
  const std::string key = mangled ? mangled : "";
  if (auto at = seen.find(key); at != seen.end()) return at->second;
  std::string n = short_name(mangled);
  auto [it, added] = name_ids.emplace(n, static_cast<int>(names.size()));
  if (added) names.push_back(n);
  seen.emplace(key, it->second);
  return it->second;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw std::runtime_error(std::string("gpu time: ") + what + ": " + (msg ? msg : "CUPTI error"));
}

void CUPTIAPI requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = size_t(8) << 20;
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

bool is_qmm(const char* name) {
  return name && (std::strstr(name, "qmv") || std::strstr(name, "qmm"));
}

void add(const CUpti_Activity* r) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      spans.push_back({k->start, k->end, true, is_qmm(k->name), k->graphId, k->correlationId,
                       name_id(k->name)});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      spans.push_back({c->start, c->end, false, false, c->graphId, c->correlationId, -1});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto s = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
      spans.push_back({s->start, s->end, false, false, s->graphId, s->correlationId, -1});
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(mu);
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) add(r);
  std::free(buf);
}

// Milliseconds covered by at least one of the spans (sorted by start here).
double union_ms(std::vector<Span> v) {
  std::sort(v.begin(), v.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  uint64_t total = 0, start = 0, end = 0;
  for (const Span& s : v) {
    if (s.end <= s.start) continue;
    if (s.start > end) {
      total += end - start;
      start = s.start;
      end = s.end;
    } else {
      end = std::max(end, s.end);
    }
  }
  total += end - start;
  return total / 1e6;
}

// The spans with each graph launch's taken whole (first start to last end, by correlation ID);
// spans outside graphs as they are. Returns the launches' count beside.
std::pair<std::vector<Span>, long> launches(const std::vector<Span>& v) {
  std::map<uint32_t, Span> whole;
  std::vector<Span> out;
  for (const Span& s : v) {
    if (s.end <= s.start) continue;
    if (!s.graph) {
      out.push_back(s);
      continue;
    }
    auto it = whole.emplace(s.corr, s).first;
    it->second.start = std::min(it->second.start, s.start);
    it->second.end = std::max(it->second.end, s.end);
  }
  for (const auto& launch : whole) out.push_back(launch.second);
  return {out, static_cast<long>(whole.size())};
}

// Each kernel name's summed milliseconds and launches, the longest first: kByKernel names, then
// the rest as "(others)".
std::vector<exactness::KernelTime> by_kernel(const std::vector<Span>& v) {
  std::map<int, std::pair<uint64_t, long>> ns;
  for (const Span& s : v) {
    if (!s.kernel || s.end <= s.start) continue;
    ns[s.name].first += s.end - s.start;
    ns[s.name].second += 1;
  }
  std::vector<exactness::KernelTime> out;
  for (const auto& [id, t] : ns) out.push_back({names[id], t.first / 1e6, t.second});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.ms != b.ms ? a.ms > b.ms : a.name < b.name;
  });
  if (out.size() > exactness::kByKernel) {
    exactness::KernelTime rest{"(others)", 0, 0};
    for (size_t i = exactness::kByKernel; i < out.size(); ++i) {
      rest.ms += out[i].ms;
      rest.launches += out[i].launches;
    }
    out.resize(exactness::kByKernel);
    out.push_back(rest);
  }
  return out;
}

void flush() {
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("gpu time: synchronize failed");
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
}

exactness::GpuTime measure(const std::function<void()>& f) {
  flush();
  {
    std::lock_guard<std::mutex> lock(mu);
    spans.clear();
  }
  f();
  flush();
  size_t dropped = 0;
  check(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), "dropped records");
  if (dropped) throw std::runtime_error("gpu time: CUPTI dropped " + std::to_string(dropped) + " records");
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Span> qmm;
  long kernels = 0;
  for (const Span& s : spans) {
    kernels += s.kernel;
    if (s.qmm) qmm.push_back(s);
  }
  auto [whole, graphs] = launches(spans);
  return {union_ms(spans), union_ms(qmm), kernels, union_ms(whole), graphs, by_kernel(spans)};
}

}  // namespace

// main.cc calls it before the probe runs, unless PROBE_GPU_TIME=0.
void install_gpu_time() {
  check(cuptiActivityRegisterCallbacks(requested, completed), "register");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  exactness::set_gpu_meter(measure);
}
