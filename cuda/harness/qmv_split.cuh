// An experiment kept for the record (not in the overlay): the split variant of the streamed
// qmv, measured on the H200 in session 5 (docs/kernels/cuda-streamed-qmv.md, "Splitting a lane").
// It is bit-identical to qmv (the harness's parity checks it) but slower than
// qmv_streamed_kernel at every shape and M measured. Included after qmv_kernels.cuh (it uses
// that file's load_tile, dequant_tile, fma_tile and dispatch_bool).
#pragma once

namespace mlx::core::cu {

// The split twin: each of upstream's 32 lanes is shared by `split` threads, each
// holding `elems_per_thread / split` of the lane's sums[i] (the rest of the lane's
// order is unchanged: the same k positions, the same fma sequence into each
// sums[i]). With fewer accumulators per thread, one thread can serve more rows
// and vectors (each x tile feeds `rows` weight rows, each weight tile `vecs`
// vectors), and the x loads of a warp are contiguous. At the end the block puts
// each lane's sums[0..E) back together in shared memory, and one warp per
// vector does qmv_kernel_impl's element sum (i = 0, 1, ...) and its cg::reduce
// over the 32 lanes, so every output is still bit-identical to qmv's for that
// vector alone. Needs whole bytes per thread tile (bits 2/4/8).
template <
    int rows,
    int vecs,
    int split,
    int prefetch,
    int elems_per_thread,
    int group_size,
    bool has_bias,
    bool has_residue_k,
    typename T,
    typename Q,
    typename S>
__global__ void __launch_bounds__(split* WARP_SIZE) qmv_split_kernel(
    const T* x,
    const Q* w,
    const S* scales,
    const T* biases,
    T* out,
    int m,
    int n,
    int k,
    int vecs_per_block,
    bool broadcast_w) {
  constexpr int R = rows;
  constexpr int E = elems_per_thread;
  constexpr int C = E / split;
  constexpr int bits = cute::sizeof_bits_v<Q>;
  static_assert(E % split == 0 && (C * bits) % 8 == 0);
  using Acc = cuda::std::conditional_t<(bits >= 8), float, T>;
  using WTile = cutlass::Array<Q, C>;
  using XTile = cutlass::Array<T, C>;
  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<WARP_SIZE>(block);
  auto w_step = [&](int idx) { return idx * cuda::std::min(8, bits) / 8; };
  int groups_per_row = k / group_size;

  // Upstream's lane this thread works for, and which C of its E values.
  int lane = block.thread_rank() / split;
  int part = block.thread_rank() % split;
  int row0 = block.group_index().x * R;
  int l = block.group_index().z;
  int v0 = block.group_index().y * vecs_per_block;
  int num_vecs = cuda::std::min(vecs_per_block, m - v0);
  x += (int64_t(m) * l + v0) * k;
  out += (int64_t(m) * l + v0) * n;
  int w_batch = broadcast_w ? 0 : l;

  // Rows past n load the last row (in bounds) and are never written; vectors
  // past num_vecs repeat the last one and are never written.
  const Q* w_row[R];
  const S* s_row[R];
  const T* b_row[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    int64_t row = cuda::std::min(row0 + rr, n - 1) + int64_t(n) * w_batch;
    w_row[rr] = w + row * w_step(k);
    s_row[rr] = scales + row * groups_per_row;
    b_row[rr] = has_bias ? biases + row * groups_per_row : nullptr;
  }
  int x_off[vecs];
#pragma unroll
  for (int v = 0; v < vecs; ++v) {
    x_off[v] = cuda::std::min(v, num_vecs - 1) * k;
  }

  Acc sums[R][vecs][C] = {};
  struct Tiles {
    WTile w[R];
    S scale[R];
    T bias[R];
  };
  auto load = [&](int idx, Tiles& t) {
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      t.w[rr] = load_tile<WTile>(w_row[rr] + w_step(idx));
      t.scale[rr] = s_row[rr][idx / group_size];
      t.bias[rr] = T{0};
      if constexpr (has_bias) {
        t.bias[rr] = b_row[rr][idx / group_size];
      }
    }
  };
  auto apply = [&](int idx, const Tiles& t) {
    XTile w_dq[R];
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      w_dq[rr] = dequant_tile<C, has_bias>(t.w[rr], t.scale[rr], t.bias[rr]);
    }
#pragma unroll
    for (int v = 0; v < vecs; ++v) {
      XTile x_vec = load_tile<XTile>(x + x_off[v] + idx);
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        fma_tile<C>(x_vec, w_dq[rr], sums[rr][v]);
      }
    }
  };

  // qmv_kernel_impl's walk over k, this thread's C values of each lane step.
  constexpr int elems_per_warp = WARP_SIZE * E;
  int lane_idx = lane * E + part * C;
  int steps = k / elems_per_warp;
  Tiles t[prefetch];
#pragma unroll
  for (int p = 0; p < prefetch; ++p) {
    if (p < steps) {
      load(lane_idx + p * elems_per_warp, t[p]);
    }
  }
  for (int r = 0; r < steps; r += prefetch) {
#pragma unroll
    for (int p = 0; p < prefetch; ++p) {
      if (r + p < steps) {
        apply(lane_idx + (r + p) * elems_per_warp, t[p]);
        if (r + p + prefetch < steps) {
          load(lane_idx + (r + p + prefetch) * elems_per_warp, t[p]);
        }
      }
    }
  }
  if constexpr (has_residue_k) {
    int rest = k % elems_per_warp;
    if (lane * E + k - rest < k) {
      Tiles tail;
      load(lane_idx + k - rest, tail);
      apply(lane_idx + k - rest, tail);
    }
  }

  // Per row: each lane's E sums back together, then per vector
  // qmv_kernel_impl's element sum and warp reduction (lane = thread in warp).
  __shared__ Acc lane_sums[vecs][E][WARP_SIZE];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
#pragma unroll
    for (int v = 0; v < vecs; ++v) {
#pragma unroll
      for (int j = 0; j < C; ++j) {
        lane_sums[v][part * C + j][lane] = sums[rr][v][j];
      }
    }
    block.sync();
    for (int v = warp.meta_group_rank(); v < vecs; v += split) {
      float sum{0};
#pragma unroll
      for (int i = 0; i < E; ++i) {
        sum += lane_sums[v][i][warp.thread_rank()];
      }
      sum = cg::reduce(warp, sum, cg::plus<float>{});
      if (warp.thread_rank() == 0 && v < num_vecs && row0 + rr < n) {
        out[int64_t(v) * n + row0 + rr] = static_cast<T>(sum);
      }
    }
    block.sync();
  }
}

// Launch of qmv_split_kernel for a LaunchShape with split > 1 (warps_per_block == split):
// one block per `rows_per_warp` weight rows, M split into the fewest blocks of at most `vecs`.
template <typename Shape, int group_size, bool has_bias, typename T, typename Q, typename S, typename F>
void qmv_split(const T* x, const Q* w, const S* scales, const T* biases, T* out, int m, int n,
               int k, int l, bool broadcast_w, F&& launch_kernel) {
  constexpr int elems_per_thread =
      (cute::sizeof_bits_v<T> <= 16 && cute::sizeof_bits_v<Q> <= 4) ? 16 : 8;
  static_assert(Shape::warps_per_block == Shape::split);
  int chunks = cuda::ceil_div(m, Shape::vecs);
  int vecs_per_block = cuda::ceil_div(m, chunks);
  dim3 num_blocks{uint32_t(cuda::ceil_div(n, Shape::rows_per_warp)), uint32_t(chunks), uint32_t(l)};
  dim3 block_dims{Shape::split * WARP_SIZE};
  void* args[] = {&x, &w, &scales, &biases, &out, &m, &n, &k, &vecs_per_block, &broadcast_w};
  dispatch_bool(k % (WARP_SIZE * elems_per_thread), [&](auto has_residue_k) {
    auto* kernel = &qmv_split_kernel<Shape::rows_per_warp, Shape::vecs, Shape::split,
                                     Shape::prefetch, elems_per_thread, group_size, has_bias,
                                     has_residue_k.value, T, Q, S>;
    launch_kernel(reinterpret_cast<void*>(kernel), num_blocks, block_dims, args);
  });
}

} // namespace mlx::core::cu
