// cg.cu: kernels that record what the GPU returns for cooperative groups over one warp
// (thread_block_tile, coalesced_threads, labeled/binary partitions, cg::reduce and the
// scans), divergent warp programs (activemask, coalesced groups, shuffles, votes, elect.sync
// and __reduce_*_sync inside branches and loops) and the cooperative-groups examples of the
// CUDA programming guide. Driven from tools/capture/capture_cg.py via ctypes; the npz keys
// are described in tools/capture/FORMAT_CG.md.
//
// Built as a shared library: nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -arch=sm_90a
// Every entry point takes host arrays, copies them to the device, launches one kernel and
// copies the results back; it returns 0 on success and -1 on a CUDA error (message in
// cg_last_error()). Values are raw bits on the host.

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace cg = cooperative_groups;

#include "common.cuh"

CAPTURE_LAST_ERROR(cg)

CAPTURE_DEVICE(cg)

__device__ __forceinline__ unsigned lane_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}

// elect.sync (sm_90): the elected lane and whether this lane is it.
__device__ __forceinline__ void elect(unsigned mask, unsigned& leader, unsigned& is_leader) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned l = 0xFFFFFFFFu, p = 0;
  asm volatile(
      "{\n\t .reg .pred q;\n\t elect.sync %0|q, %2;\n\t selp.u32 %1, 1, 0, q;\n\t}"
      : "=r"(l), "=r"(p)
      : "r"(mask));
  leader = l;
  is_leader = p;
#else
  leader = 0xFFFFFFFFu;
  is_leader = 0xFFFFFFFFu;
#endif
}

// ---------------------------------------------------------------------------------------
// (a) thread_block_tile<N> of a block of 64 threads (two warps), one block per trial.
// offs (NOFF,) int32: the srcRank / delta / laneMask values tried. Per thread the output
// row `info` holds TILE_INFO words; shuffles of int (uint32 bits), float (uint32 bits) and
// double (uint64 bits): out[mode][off] with mode 0 shfl, 1 shfl_up, 2 shfl_down, 3 shfl_xor.

constexpr int TILE_BLOCK = 64;
constexpr int TILE_INFO = 14;

template <int N>
__global__ void k_tile(int nofF, const int* offs, const uint32_t* xi, const uint64_t* xd,
                       const int* pred, uint32_t* info, uint32_t* si, uint32_t* sf, uint64_t* sd) {
  const int t = blockIdx.x, th = threadIdx.x;
  const size_t g = (size_t)t * TILE_BLOCK + th;
  auto tile = cg::tiled_partition<N>(cg::this_thread_block());
  const uint32_t vi = xi[g];
  float vf;
  memcpy(&vf, &vi, 4);
  const uint64_t d = xd[g];
  double vd;
  memcpy(&vd, &d, 8);
  const int p = pred[g];
  uint32_t* o = info + g * TILE_INFO;
  o[0] = tile.thread_rank();
  o[1] = tile.meta_group_rank();
  o[2] = tile.num_threads();
  o[3] = tile.meta_group_size();
  o[4] = tile.any(p);
  o[5] = tile.all(p);
  o[6] = tile.ballot(p);
  o[7] = tile.match_any(vi);
  int mp = 0;
  o[8] = tile.match_all(vi, mp);
  o[9] = (uint32_t)mp;
  o[10] = tile.match_any(d);
  tile.sync();
  unsigned leader = 0, is_leader = 0;
  // invoke_one runs the function on one (elected) thread: record which.
  cg::invoke_one(tile, [&] { is_leader = 1; });
  leader = tile.ballot(is_leader);
  o[11] = leader;
  // A tile of the tile: its meta_group_rank / meta_group_size count within the parent tile.
  if constexpr (N > 1) {
    auto sub = cg::tiled_partition<N / 2>(tile);
    o[12] = sub.meta_group_rank();
    o[13] = sub.meta_group_size();
  } else {
    o[12] = 0xDEADBEEFu;
    o[13] = 0xDEADBEEFu;
  }
  for (int k = 0; k < nofF; ++k) {
    const int b = offs[k];
    const size_t base = (g * 4) * nofF;
    uint32_t r;
    float rf;
    double rd;
    si[base + 0 * nofF + k] = tile.shfl(vi, b);
    si[base + 1 * nofF + k] = tile.shfl_up(vi, (unsigned)b);
    si[base + 2 * nofF + k] = tile.shfl_down(vi, (unsigned)b);
    si[base + 3 * nofF + k] = tile.shfl_xor(vi, (unsigned)b);
    rf = tile.shfl(vf, b);
    memcpy(&r, &rf, 4);
    sf[base + 0 * nofF + k] = r;
    rf = tile.shfl_up(vf, (unsigned)b);
    memcpy(&r, &rf, 4);
    sf[base + 1 * nofF + k] = r;
    rf = tile.shfl_down(vf, (unsigned)b);
    memcpy(&r, &rf, 4);
    sf[base + 2 * nofF + k] = r;
    rf = tile.shfl_xor(vf, (unsigned)b);
    memcpy(&r, &rf, 4);
    sf[base + 3 * nofF + k] = r;
    uint64_t r64;
    rd = tile.shfl(vd, b);
    memcpy(&r64, &rd, 8);
    sd[base + 0 * nofF + k] = r64;
    rd = tile.shfl_up(vd, (unsigned)b);
    memcpy(&r64, &rd, 8);
    sd[base + 1 * nofF + k] = r64;
    rd = tile.shfl_down(vd, (unsigned)b);
    memcpy(&r64, &rd, 8);
    sd[base + 2 * nofF + k] = r64;
    rd = tile.shfl_xor(vd, (unsigned)b);
    memcpy(&r64, &rd, 8);
    sd[base + 3 * nofF + k] = r64;
  }
}

EXPORT int cg_tile(int n, int T, int nofF, const int* offs, const uint32_t* xi, const uint64_t* xd,
                   const int* pred, uint32_t* info, uint32_t* si, uint32_t* sf, uint64_t* sd) {
  const size_t th = (size_t)T * TILE_BLOCK;
  Dev doffs, dxi, dxd, dp, dinfo, dsi, dsf, dsd;
  if (doffs.up(offs, 4 * (size_t)nofF) || dxi.up(xi, 4 * th) || dxd.up(xd, 8 * th) ||
      dp.up(pred, 4 * th) || dinfo.zeros(4 * th * TILE_INFO) || dsi.zeros(16 * th * nofF) ||
      dsf.zeros(16 * th * nofF) || dsd.zeros(32 * th * nofF))
    return -1;
#define CG_TILE_LAUNCH(N)                                                                  \
  k_tile<N><<<T, TILE_BLOCK>>>(nofF, doffs.as<int>(), dxi.as<uint32_t>(), dxd.as<uint64_t>(), \
                               dp.as<int>(), dinfo.as<uint32_t>(), dsi.as<uint32_t>(),       \
                               dsf.as<uint32_t>(), dsd.as<uint64_t>())
  if (T) {
    switch (n) {
      case 1: CG_TILE_LAUNCH(1); break;
      case 2: CG_TILE_LAUNCH(2); break;
      case 4: CG_TILE_LAUNCH(4); break;
      case 8: CG_TILE_LAUNCH(8); break;
      case 16: CG_TILE_LAUNCH(16); break;
      case 32: CG_TILE_LAUNCH(32); break;
      default: snprintf(g_err, sizeof g_err, "cg_tile: bad size %d", n); return -1;
    }
  }
#undef CG_TILE_LAUNCH
  if (finish()) return -1;
  if (dinfo.down(info, 4 * th * TILE_INFO) || dsi.down(si, 16 * th * nofF) ||
      dsf.down(sf, 16 * th * nofF) || dsd.down(sd, 32 * th * nofF))
    return -1;
  return 0;
}

// ---------------------------------------------------------------------------------------
// (b) cg::reduce, cg::inclusive_scan and cg::exclusive_scan, one warp per trial.
// cfg (T, 2): group (1, 2, 4, 8, 16, 32 = tiled_partition<N> of the block; 0 = coalesced
// group of the lanes in mask), mask (lanes that take part; for tiles all 32 do).
// Per lane NRED results, op-major: for op in plus, less, greater, bit_and, bit_or, bit_xor:
// reduce, inclusive_scan, exclusive_scan. Results a type does not have and lanes outside
// the mask keep the filler the host put into `out`.

constexpr int NRED = 18;

template <class T>
struct Raw {
  using type = std::conditional_t<sizeof(T) == 8, uint64_t,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
};

template <class T>
__device__ __forceinline__ void put(typename Raw<T>::type* o, T v) {
  typename Raw<T>::type r;
  memcpy(&r, &v, sizeof(T));
  *o = r;
}

template <class T, class G, template <class> class Op>
__device__ __forceinline__ void red_op(const G& g, T v, typename Raw<T>::type* o) {
  put<T>(o + 0, cg::reduce(g, v, Op<T>()));
  put<T>(o + 1, cg::inclusive_scan(g, v, Op<T>()));
  put<T>(o + 2, cg::exclusive_scan(g, v, Op<T>()));
}

template <class T, class G>
__device__ void red_all(const G& g, T v, typename Raw<T>::type* o) {
  red_op<T, G, cg::plus>(g, v, o + 0);
  red_op<T, G, cg::less>(g, v, o + 3);
  red_op<T, G, cg::greater>(g, v, o + 6);
  if constexpr (std::is_integral<T>::value) {
    red_op<T, G, cg::bit_and>(g, v, o + 9);
    red_op<T, G, cg::bit_or>(g, v, o + 12);
    red_op<T, G, cg::bit_xor>(g, v, o + 15);
  }
}

template <class T>
__global__ void k_red(const int* cfg, const typename Raw<T>::type* x, typename Raw<T>::type* out) {
  const int t = blockIdx.x, lane = threadIdx.x;
  const int group = cfg[2 * t];
  const unsigned mask = (unsigned)cfg[2 * t + 1];
  const size_t gi = (size_t)t * 32 + lane;
  T v;
  memcpy(&v, &x[gi], sizeof(T));
  auto* o = out + gi * NRED;
  auto block = cg::this_thread_block();
  switch (group) {
    case 1: red_all<T>(cg::tiled_partition<1>(block), v, o); break;
    case 2: red_all<T>(cg::tiled_partition<2>(block), v, o); break;
    case 4: red_all<T>(cg::tiled_partition<4>(block), v, o); break;
    case 8: red_all<T>(cg::tiled_partition<8>(block), v, o); break;
    case 16: red_all<T>(cg::tiled_partition<16>(block), v, o); break;
    case 32: red_all<T>(cg::tiled_partition<32>(block), v, o); break;
    default:
      if ((mask >> lane) & 1u) red_all<T>(cg::coalesced_threads(), v, o);
      break;
  }
}

template <class T>
static int run_red(int T_, const int* cfg, const void* x, void* out) {
  using R = typename Raw<T>::type;
  const size_t n = (size_t)T_ * 32;
  Dev dc, dx, dout;
  if (dc.up(cfg, 8 * (size_t)T_) || dx.up(x, sizeof(R) * n) || dout.up(out, sizeof(R) * n * NRED))
    return -1;
  if (T_) k_red<T><<<T_, 32>>>(dc.as<int>(), dx.as<R>(), dout.as<R>());
  if (finish()) return -1;
  return dout.down(out, sizeof(R) * n * NRED);
}

// ty: 0 int32, 1 uint32, 2 int64, 3 uint64, 4 float, 5 double, 6 __half, 7 __nv_bfloat16.
EXPORT int cg_reduce(int ty, int T, const int* cfg, const void* x, void* out) {
  switch (ty) {
    case 0: return run_red<int32_t>(T, cfg, x, out);
    case 1: return run_red<uint32_t>(T, cfg, x, out);
    case 2: return run_red<long long>(T, cfg, x, out);
    case 3: return run_red<unsigned long long>(T, cfg, x, out);
    case 4: return run_red<float>(T, cfg, x, out);
    case 5: return run_red<double>(T, cfg, x, out);
    case 6: return run_red<__half>(T, cfg, x, out);
    case 7: return run_red<__nv_bfloat16>(T, cfg, x, out);
  }
  snprintf(g_err, sizeof g_err, "cg_reduce: unknown type %d", ty);
  return -1;
}

// ---------------------------------------------------------------------------------------
// (c) Coalesced groups and partitions, one warp per trial. cfg (T, 4): kind, mask, param,
// unused. The lanes in mask enter a branch; there the group is
//   kind 0: coalesced_threads()
//   kind 1: labeled_partition(coalesced_threads(), label)
//   kind 2: binary_partition(coalesced_threads(), pred)
//   kind 3: labeled_partition(tiled_partition<32>(block), label)   (mask must be all lanes)
//   kind 4: binary_partition(tiled_partition<32>(block), pred)     (mask must be all lanes)
//   kind 5: tiled_partition(coalesced_threads(), param)
// and the lane records NPART words (see FORMAT_CG.md): size, thread_rank, meta_group_rank,
// meta_group_size, ballot, any, all, match_any, match_all value/pred, shfl(x, r) for r in
// offs, shfl_up/shfl_down(x, d) for d in offs, reduce/inclusive/exclusive plus on int,
// reduce less int, reduce plus float, inclusive_scan plus float, invoke_one leader mask,
// the lane's mask as thread_rank order. Lanes outside the mask keep the host's filler.

constexpr int NPART_FIXED = 19;

template <class G>
__device__ void part_ops(const G& g, int nofF, const int* offs, uint32_t x, int p, uint32_t* o) {
  o[0] = g.num_threads();
  o[1] = g.thread_rank();
  o[2] = g.meta_group_rank();
  o[3] = g.meta_group_size();
  o[4] = g.ballot(p);
  o[5] = g.any(p);
  o[6] = g.all(p);
  o[7] = g.match_any(x & 7u);
  int mp = 0;
  o[8] = g.match_all(x & 1u, mp);
  o[9] = (uint32_t)mp;
  const int xi = (int)x;
  o[10] = (uint32_t)cg::reduce(g, xi, cg::plus<int>());
  o[11] = (uint32_t)cg::inclusive_scan(g, xi, cg::plus<int>());
  o[12] = (uint32_t)cg::exclusive_scan(g, xi, cg::plus<int>());
  o[13] = (uint32_t)cg::reduce(g, xi, cg::less<int>());
  float f;
  memcpy(&f, &x, 4);
  float r = cg::reduce(g, f, cg::plus<float>());
  memcpy(&o[14], &r, 4);
  r = cg::inclusive_scan(g, f, cg::plus<float>());
  memcpy(&o[15], &r, 4);
  r = cg::exclusive_scan(g, f, cg::plus<float>());
  memcpy(&o[16], &r, 4);
  unsigned is_leader = 0;
  cg::invoke_one(g, [&] { is_leader = 1; });
  o[17] = __ballot_sync(__activemask(), is_leader);
  o[18] = __activemask();
  for (int k = 0; k < nofF; ++k) {
    const int b = offs[k];
    o[NPART_FIXED + k] = g.shfl(x, b);
    o[NPART_FIXED + nofF + k] = g.shfl_up(x, (unsigned)b);
    o[NPART_FIXED + 2 * nofF + k] = g.shfl_down(x, (unsigned)b);
  }
}

__global__ void k_part(int nofF, const int* cfg, const int* offs, const uint32_t* x,
                       const int* label, const int* pred, uint32_t* out) {
  const int t = blockIdx.x, lane = threadIdx.x;
  const int kind = cfg[4 * t];
  const unsigned mask = (unsigned)cfg[4 * t + 1];
  const int param = cfg[4 * t + 2];
  const size_t gi = (size_t)t * 32 + lane;
  const int npart = NPART_FIXED + 3 * nofF;
  uint32_t* o = out + gi * npart;
  const uint32_t v = x[gi];
  const int lab = label[gi];
  const int p = pred[gi];
  if (kind == 3) {
    auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    part_ops(cg::labeled_partition(tile, lab), nofF, offs, v, p, o);
  } else if (kind == 4) {
    auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    part_ops(cg::binary_partition(tile, p != 0), nofF, offs, v, p, o);
  } else if ((mask >> lane) & 1u) {
    auto ct = cg::coalesced_threads();
    switch (kind) {
      case 0: part_ops(ct, nofF, offs, v, p, o); break;
      case 1: part_ops(cg::labeled_partition(ct, lab), nofF, offs, v, p, o); break;
      case 2: part_ops(cg::binary_partition(ct, p != 0), nofF, offs, v, p, o); break;
      default: part_ops(cg::tiled_partition(ct, (unsigned)param), nofF, offs, v, p, o); break;
    }
  }
}

EXPORT int cg_part(int T, int nofF, const int* cfg, const int* offs, const uint32_t* x,
                   const int* label, const int* pred, uint32_t* out) {
  const size_t n = (size_t)T * 32, npart = NPART_FIXED + 3 * (size_t)nofF;
  Dev dc, doffs, dx, dl, dp, dout;
  if (dc.up(cfg, 16 * (size_t)T) || doffs.up(offs, 4 * (size_t)nofF) || dx.up(x, 4 * n) ||
      dl.up(label, 4 * n) || dp.up(pred, 4 * n) || dout.up(out, 4 * n * npart))
    return -1;
  if (T)
    k_part<<<T, 32>>>(nofF, dc.as<int>(), doffs.as<int>(), dx.as<uint32_t>(), dl.as<int>(),
                      dp.as<int>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 4 * n * npart);
}

// ---------------------------------------------------------------------------------------
// (d) Divergent programs, one warp per trial. Each lane writes NSLOT probes of NPROBE words
// (filler where it never reached a probe). cfg (T, 4): program, a, b, c.
// A probe, taken with the lanes that reach it, records (m = __activemask()):
//  0 m            1 coalesced size     2 coalesced thread_rank   3 __shfl_sync(m, x, a % 32)
//  4 __shfl_down_sync(m, x, 1)   5 __shfl_xor_sync(m, x, 1)   6 __ballot_sync(m, x & 1)
//  7 __any_sync(m, x & 1)  8 __all_sync(m, x & 1)  9 __match_any_sync(m, x & 3)
// 10 __reduce_add_sync(m, x)  11 __reduce_min_sync(m, (int)x)  12 __reduce_max_sync(m, x)
// 13 __reduce_and_sync(m, x)  14 __reduce_or_sync(m, x)   15 __reduce_xor_sync(m, x)
// 16 elect.sync(m) leader lane  17 elect.sync(m) is-leader  18 coalesced shfl(x, 0)
// 19 order: the value of a per-warp counter that the elected lane of each probe bumps
//    (tells which path ran first)
// 20 cg::reduce(coalesced, float bits of x, plus)  21 __reduce_min_sync(m, x) unsigned
// 22 __reduce_max_sync(m, (int)x)   23 __reduce_add_sync(m, (int)x)

constexpr int NPROBE = 24;
constexpr int NSLOT = 16;

__device__ void probe(int slot, uint32_t x, int a, uint32_t* o, unsigned* counter) {
  const unsigned m = __activemask();
  auto ct = cg::coalesced_threads();
  uint32_t* q = o + slot * NPROBE;
  q[0] = m;
  q[1] = ct.num_threads();
  q[2] = ct.thread_rank();
  q[3] = __shfl_sync(m, x, a & 31);
  q[4] = __shfl_down_sync(m, x, 1);
  q[5] = __shfl_xor_sync(m, x, 1);
  q[6] = __ballot_sync(m, x & 1u);
  q[7] = __any_sync(m, x & 1u);
  q[8] = __all_sync(m, x & 1u);
  q[9] = __match_any_sync(m, x & 3u);
  q[10] = __reduce_add_sync(m, x);
  q[11] = (uint32_t)__reduce_min_sync(m, (int)x);
  q[12] = __reduce_max_sync(m, x);
  q[13] = __reduce_and_sync(m, x);
  q[14] = __reduce_or_sync(m, x);
  q[15] = __reduce_xor_sync(m, x);
  unsigned leader, is_leader;
  elect(m, leader, is_leader);
  q[16] = leader;
  q[17] = is_leader;
  q[18] = ct.shfl(x, 0);
  unsigned seq = 0;
  if (is_leader) seq = atomicAdd(counter, 1u);
  q[19] = __shfl_sync(m, seq, leader & 31);
  float f;
  memcpy(&f, &x, 4);
  const float r = cg::reduce(ct, f, cg::plus<float>());
  memcpy(&q[20], &r, 4);
  q[21] = __reduce_min_sync(m, x);
  q[22] = (uint32_t)__reduce_max_sync(m, (int)x);
  q[23] = (uint32_t)__reduce_add_sync(m, (int)x);
  __syncwarp(m);
}

// Per-lane hash used by the loop programs for data-dependent conditions.
__device__ __forceinline__ uint32_t mix(uint32_t v) {
  v ^= v >> 16;
  v *= 0x7feb352dU;
  v ^= v >> 15;
  return v;
}

__global__ void k_div(const int* cfg, const uint32_t* x, uint32_t* out) {
  __shared__ unsigned counter;
  const int t = blockIdx.x;
  const unsigned lane = threadIdx.x;
  const int prog = cfg[4 * t], a = cfg[4 * t + 1], b = cfg[4 * t + 2], c = cfg[4 * t + 3];
  const size_t gi = (size_t)t * 32 + lane;
  uint32_t* o = out + gi * NSLOT * NPROBE;
  uint32_t v = x[gi];
  if (lane == 0) counter = 0;
  __syncwarp();
  switch (prog) {
    case 0:  // branch on lane id: lane < b
      if ((int)lane < b) probe(0, v, a, o, &counter);
      else probe(1, v, a, o, &counter);
      probe(2, v, a, o, &counter);
      break;
    case 1:  // branch on data: bit b of x
      if ((v >> b) & 1u) probe(0, v, a, o, &counter);
      else probe(1, v, a, o, &counter);
      probe(2, v, a, o, &counter);
      break;
    case 2:  // one-sided branch on lane set (mask b)
      if (((unsigned)b >> lane) & 1u) probe(0, v, a, o, &counter);
      probe(2, v, a, o, &counter);
      break;
    case 3:  // nested branches
      if ((int)lane < b) {
        probe(0, v, a, o, &counter);
        if (v & 1u) probe(1, v, a, o, &counter);
        else probe(2, v, a, o, &counter);
        probe(3, v, a, o, &counter);
      } else {
        if (lane % (unsigned)(c > 0 ? c : 3) == 0) probe(4, v, a, o, &counter);
        probe(5, v, a, o, &counter);
      }
      probe(6, v, a, o, &counter);
      break;
    case 4: {  // three-way branch on data
      const unsigned r = v % 3u;
      if (r == 0) probe(0, v, a, o, &counter);
      else if (r == 1) probe(1, v, a, o, &counter);
      else probe(2, v, a, o, &counter);
      probe(3, v, a, o, &counter);
      break;
    }
    case 5: {  // loop with a per-lane trip count (x % b), values change each trip
      const unsigned trips = v % (unsigned)(b > 0 ? b : 1);
      uint32_t w = v;
      for (unsigned i = 0; i < trips; ++i) {
        probe(i < NSLOT - 1 ? i : NSLOT - 2, w, a, o, &counter);
        w = mix(w + i);
      }
      probe(NSLOT - 1, w, a, o, &counter);
      break;
    }
    case 6: {  // while loop with a data-dependent break (probe at the top of each trip)
      uint32_t w = v;
      unsigned i = 0;
      while (true) {
        probe(i < NSLOT - 1 ? i : NSLOT - 2, w, a, o, &counter);
        ++i;
        w = mix(w);
        if ((w % (unsigned)(b > 1 ? b : 2)) == 0 || i >= (unsigned)c) break;
      }
      probe(NSLOT - 1, w, a, o, &counter);
      break;
    }
    case 7:  // early exit of some lanes (lanes in mask b return)
      if (((unsigned)b >> lane) & 1u) return;
      probe(0, v, a, o, &counter);
      break;
    case 8: {  // branch inside a loop: trip count per lane, branch on the trip parity
      const unsigned trips = v % (unsigned)(b > 0 ? b : 1);
      uint32_t w = v;
      for (unsigned i = 0; i < trips && 2 * i + 1 < NSLOT - 1; ++i) {
        if ((w ^ i) & 1u) probe(2 * i, w, a, o, &counter);
        else probe(2 * i + 1, w, a, o, &counter);
        w = mix(w + i);
      }
      probe(NSLOT - 1, w, a, o, &counter);
      break;
    }
    default:  // no branch
      probe(0, v, a, o, &counter);
      break;
  }
}

EXPORT int cg_div(int T, const int* cfg, const uint32_t* x, uint32_t* out) {
  const size_t n = (size_t)T * 32, words = n * NSLOT * NPROBE;
  Dev dc, dx, dout;
  if (dc.up(cfg, 16 * (size_t)T) || dx.up(x, 4 * n) || dout.up(out, 4 * words)) return -1;
  if (T) k_div<<<T, 32>>>(dc.as<int>(), dx.as<uint32_t>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 4 * words);
}

// ---------------------------------------------------------------------------------------
// Undefined uses, one warp per trial (run by the driver in a child process with a timeout,
// since a warp-synchronous call whose mask names lanes that never arrive may hang).
// cfg (T, 4): program, a, b, unused; lanes < b take the branch. Per lane UNDEF words:
//  0 r1  1 r2  2 __activemask() after  3 reached-end flag (1).
//   prog 0: then: r1 = __shfl_sync(0xffffffff, x, a)               else nothing
//   prog 1: then: r1 = __shfl_sync(0xffffffff, x, a)  else: r2 = __shfl_sync(0xffffffff, x + 1000, a)
//   prog 2: then: r1 = __ballot_sync(0xffffffff, x & 1)            else nothing
//   prog 3: then: r1 = __ballot_sync(0xffffffff, x & 1) else: r2 = __ballot_sync(0xffffffff, ~x & 1)
//   prog 4: then: __syncwarp(0xffffffff); r1 = __activemask()      else nothing
//   prog 5: then: __syncwarp(0xffffffff); r1 = __activemask() else: __syncwarp(0xffffffff); r2 = __activemask()
//   prog 6: then: r1 = __reduce_add_sync(0xffffffff, x)            else nothing
//   prog 7: then: r1 = __shfl_sync(0xffffffff, x, a) (as 0, but b lanes of the mask exited)

constexpr int UNDEF = 4;

__global__ void k_undef(const int* cfg, const uint32_t* x, uint32_t* out) {
  const int t = blockIdx.x;
  const unsigned lane = threadIdx.x;
  const int prog = cfg[4 * t], a = cfg[4 * t + 1], b = cfg[4 * t + 2];
  const size_t gi = (size_t)t * 32 + lane;
  uint32_t* o = out + gi * UNDEF;
  const uint32_t v = x[gi];
  uint32_t r1 = 0xDEADBEEFu, r2 = 0xDEADBEEFu;
  const bool take = (int)lane < b;
  switch (prog) {
    case 0: if (take) r1 = __shfl_sync(0xffffffffu, v, a); break;
    case 1:
      if (take) r1 = __shfl_sync(0xffffffffu, v, a);
      else r2 = __shfl_sync(0xffffffffu, v + 1000u, a);
      break;
    case 2: if (take) r1 = __ballot_sync(0xffffffffu, v & 1u); break;
    case 3:
      if (take) r1 = __ballot_sync(0xffffffffu, v & 1u);
      else r2 = __ballot_sync(0xffffffffu, ~v & 1u);
      break;
    case 4:
      if (take) {
        __syncwarp(0xffffffffu);
        r1 = __activemask();
      }
      break;
    case 5:
      if (take) {
        __syncwarp(0xffffffffu);
        r1 = __activemask();
      } else {
        __syncwarp(0xffffffffu);
        r2 = __activemask();
      }
      break;
    case 6: if (take) r1 = __reduce_add_sync(0xffffffffu, v); break;
    default:
      if (!take) {
        o[3] = 2;
        return;
      }
      r1 = __shfl_sync(0xffffffffu, v, a);
      break;
  }
  o[0] = r1;
  o[1] = r2;
  o[2] = __activemask();
  o[3] = 1;
}

EXPORT int cg_undef(int T, const int* cfg, const uint32_t* x, uint32_t* out) {
  const size_t n = (size_t)T * 32;
  Dev dc, dx, dout;
  if (dc.up(cfg, 16 * (size_t)T) || dx.up(x, 4 * n) || dout.up(out, 4 * n * UNDEF)) return -1;
  if (T) k_undef<<<T, 32>>>(dc.as<int>(), dx.as<uint32_t>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 4 * n * UNDEF);
}

// ---------------------------------------------------------------------------------------
// The programming guide's cooperative-groups examples, written out here.
// ex 0 (tiled reduction): blocks of 128 threads; each thread_block_tile<32> sums its
//   int and float values with cg::reduce, lane 0 of each tile writes the tile sums and
//   atomically adds the int sum to a total. out_i[tile], out_f[tile], total.
// ex 1 (stream compaction with exclusive_scan): one tile of 32 per block; lanes whose value
//   is valid (x % 3 != 0) write it to out[block * 32 + exclusive_scan(tile, valid)], the
//   count goes to counts[block].
// ex 2 (labeled_partition aggregation): per warp, labeled_partition(tile32, x % 4); the
//   rank-0 thread of each partition adds the partition size to hist[label] and writes the
//   partition's float sum (cg::reduce) to fsum[warp * 4 + label].
// ex 3 (coalesced_threads atomic aggregation, atomicAggInc): lanes whose x is odd take a
//   branch and get a slot from a counter: the coalesced group's rank-0 thread does one
//   atomicAdd of the group size, the others add their rank to the broadcast base.

__device__ int atomic_agg_inc(int* ptr) {
  cg::coalesced_group g = cg::coalesced_threads();
  int prev;
  if (g.thread_rank() == 0) prev = atomicAdd(ptr, (int)g.num_threads());
  prev = g.thread_rank() + g.shfl(prev, 0);
  return prev;
}

__global__ void k_ex(int ex, const uint32_t* x, int* oi, uint32_t* of, int* ctr) {
  auto block = cg::this_thread_block();
  auto tile = cg::tiled_partition<32>(block);
  const size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t v = x[g];
  if (ex == 0) {
    const int vi = (int)(v & 0xFFFF) - 0x8000;
    float vf;
    memcpy(&vf, &v, 4);
    const int si = cg::reduce(tile, vi, cg::plus<int>());
    const float sf = cg::reduce(tile, vf, cg::plus<float>());
    const size_t tix = g / 32;
    if (tile.thread_rank() == 0) {
      oi[tix] = si;
      memcpy(&of[tix], &sf, 4);
      atomicAdd(ctr, si);
    }
  } else if (ex == 1) {
    const int valid = (v % 3u) != 0;
    const int off = cg::exclusive_scan(tile, valid);
    if (valid) oi[blockIdx.x * 32 + off] = (int)v;
    const int count = cg::reduce(tile, valid, cg::plus<int>());
    if (tile.thread_rank() == 0) ctr[blockIdx.x] = count;
  } else if (ex == 2) {
    const int label = (int)(v % 4u);
    auto part = cg::labeled_partition(tile, label);
    float vf;
    const uint32_t bits = (v & 0x807FFFFFu) | (((v >> 8) % 40u + 107u) << 23);  // |x| in [2^-20, 2^20)
    memcpy(&vf, &bits, 4);
    const float s = cg::reduce(part, vf, cg::plus<float>());
    const size_t warp = g / 32;
    if (part.thread_rank() == 0) {
      atomicAdd(&ctr[label], (int)part.num_threads());
      memcpy(&of[warp * 4 + label], &s, 4);
    }
  } else {
    if (v & 1u) oi[g] = atomic_agg_inc(&ctr[blockIdx.x]);
  }
}

// Sizes: n threads (multiple of 128 for ex 0, of 32 otherwise). oi, of, ctr hold what the
// host passed (filler) and come back with the results.
EXPORT int cg_example(int ex, int n, const uint32_t* x, int* oi, int noi, uint32_t* of, int nof_,
                      int* ctr, int nctr) {
  Dev dx, doi, dof, dctr;
  if (dx.up(x, 4 * (size_t)n) || doi.up(oi, 4 * (size_t)noi) || dof.up(of, 4 * (size_t)nof_) ||
      dctr.up(ctr, 4 * (size_t)nctr))
    return -1;
  const int bs = ex == 0 ? 128 : 32;
  if (n) k_ex<<<n / bs, bs>>>(ex, dx.as<uint32_t>(), doi.as<int>(), dof.as<uint32_t>(), dctr.as<int>());
  if (finish()) return -1;
  if (doi.down(oi, 4 * (size_t)noi) || dof.down(of, 4 * (size_t)nof_) || dctr.down(ctr, 4 * (size_t)nctr))
    return -1;
  return 0;
}
