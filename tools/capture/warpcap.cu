// warpcap.cu: kernels that record what the GPU really returns for warp intrinsics,
// DPX functions, conversions and WMMA, driven from tools/capture/capture.py via ctypes.
//
// Built as a shared library: nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -arch=sm_XY
// Every entry point takes host arrays, copies them to the device, launches one kernel and
// copies the results back; it returns 0 on success and -1 on a CUDA error (message in
// wc_last_error()), or -2 when the configuration needs a newer GPU than the one found.
//
// Everything is raw bits: callers pass and receive uint16/uint32/uint64 words; no value is
// interpreted on the host.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

using namespace nvcuda;

// mma.h #undefs its own feature macros at its end, so repeat its conditions here.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 720
#define WC_IMMA 1
#endif
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 730
#define WC_SUBBYTE 1
#endif
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define WC_AMPERE 1
#endif

#include "common.cuh"

CAPTURE_LAST_ERROR(wc)

static int g_cc = -1;  // compute capability * 10 of device 0

CAPTURE_DEVICE(wc)

// The architecture this library was compiled for (the __CUDA_ARCH__ the kernels saw).
__global__ void k_arch(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}
EXPORT int wc_compiled_arch(int* arch) {
  Dev d;
  if (d.alloc(4)) return -1;
  k_arch<<<1, 1>>>(d.as<int>());
  if (finish()) return -1;
  return d.down(arch, 4);
}

// ---------------------------------------------------------------------------------------
// Shuffles. cfg is (W, 4) int32: mode, b, width, mask. One warp per row. Lanes outside the
// mask do not call the intrinsic and write `filler`.

template <class Raw, class V>
__global__ void k_shfl(const int* cfg, const Raw* x, Raw* out, Raw filler) {
  const int w = blockIdx.x, lane = threadIdx.x;
  const int mode = cfg[4 * w], b = cfg[4 * w + 1], width = cfg[4 * w + 2];
  const unsigned mask = (unsigned)cfg[4 * w + 3];
  Raw r = filler;
  if ((mask >> lane) & 1u) {
    Raw xr = x[32 * w + lane];
    V v;
    memcpy(&v, &xr, sizeof(V));
    V o;
    switch (mode) {
      case 0: o = __shfl_sync(mask, v, b, width); break;
      case 1: o = __shfl_up_sync(mask, v, (unsigned)b, width); break;
      case 2: o = __shfl_down_sync(mask, v, (unsigned)b, width); break;
      default: o = __shfl_xor_sync(mask, v, b, width); break;
    }
    memcpy(&r, &o, sizeof(V));
  }
  out[32 * w + lane] = r;
}

template <class Raw, class V>
static int run_shfl(int W, const int* cfg, const Raw* x, Raw* out, Raw filler) {
  Dev dc, dx, dout;
  if (dc.up(cfg, 16 * (size_t)W) || dx.up(x, sizeof(Raw) * 32 * (size_t)W) ||
      dout.alloc(sizeof(Raw) * 32 * (size_t)W))
    return -1;
  if (W) k_shfl<Raw, V><<<W, 32>>>(dc.as<int>(), dx.as<Raw>(), dout.as<Raw>(), filler);
  if (finish()) return -1;
  return dout.down(out, sizeof(Raw) * 32 * (size_t)W);
}

// kind: 0 uint32 (unsigned int), 1 uint64 (unsigned long long), 2 __half2, 3 __nv_bfloat162,
// 4 __half, 5 __nv_bfloat16.
EXPORT int wc_shfl(int kind, int W, const int* cfg, const void* x, void* out) {
  switch (kind) {
    case 0: return run_shfl<uint32_t, unsigned>(W, cfg, (const uint32_t*)x, (uint32_t*)out, 0xDEADBEEFu);
    case 1:
      return run_shfl<uint64_t, unsigned long long>(W, cfg, (const uint64_t*)x, (uint64_t*)out,
                                                    0xDEADBEEFDEADBEEFull);
    case 2: return run_shfl<uint32_t, __half2>(W, cfg, (const uint32_t*)x, (uint32_t*)out, 0xDEADBEEFu);
    case 3: return run_shfl<uint32_t, __nv_bfloat162>(W, cfg, (const uint32_t*)x, (uint32_t*)out, 0xDEADBEEFu);
    case 4: return run_shfl<uint16_t, __half>(W, cfg, (const uint16_t*)x, (uint16_t*)out, (uint16_t)0xBEEF);
    case 5: return run_shfl<uint16_t, __nv_bfloat16>(W, cfg, (const uint16_t*)x, (uint16_t*)out, (uint16_t)0xBEEF);
  }
  snprintf(g_err, sizeof g_err, "wc_shfl: unknown kind %d", kind);
  return -1;
}

// ---------------------------------------------------------------------------------------
// Reductions (sm_80+). cfg (R, 2): op, mask.

__global__ void k_reduce(const int* cfg, const uint32_t* x, uint32_t* out) {
  const int w = blockIdx.x, lane = threadIdx.x;
  const int op = cfg[2 * w];
  const unsigned mask = (unsigned)cfg[2 * w + 1];
  uint32_t r = 0xDEADBEEFu;
  (void)op;
  (void)mask;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if ((mask >> lane) & 1u) {
    const uint32_t v = x[32 * w + lane];
    switch (op) {
      case 0: r = __reduce_add_sync(mask, v); break;
      case 1: r = __reduce_min_sync(mask, v); break;
      case 2: r = __reduce_max_sync(mask, v); break;
      case 3: r = (uint32_t)__reduce_add_sync(mask, (int)v); break;
      case 4: r = (uint32_t)__reduce_min_sync(mask, (int)v); break;
      case 5: r = (uint32_t)__reduce_max_sync(mask, (int)v); break;
      case 6: r = __reduce_and_sync(mask, v); break;
      case 7: r = __reduce_or_sync(mask, v); break;
      default: r = __reduce_xor_sync(mask, v); break;
    }
  }
#endif
  out[32 * w + lane] = r;
}

EXPORT int wc_reduce(int R, const int* cfg, const uint32_t* x, uint32_t* out) {
  if (g_cc >= 0 && g_cc < 80) return -2;
  Dev dc, dx, dout;
  if (dc.up(cfg, 8 * (size_t)R) || dx.up(x, 128 * (size_t)R) || dout.alloc(128 * (size_t)R)) return -1;
  if (R) k_reduce<<<R, 32>>>(dc.as<int>(), dx.as<uint32_t>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 128 * (size_t)R);
}

// ---------------------------------------------------------------------------------------
// Votes. out (V, 32, 6): ballot, any, all, match_any, match_all, match_all's pred.

__global__ void k_vote(const uint32_t* masks, const uint32_t* x, uint32_t* out) {
  const int w = blockIdx.x, lane = threadIdx.x;
  const unsigned mask = masks[w];
  uint32_t r[6];
  for (int i = 0; i < 6; ++i) r[i] = 0xDEADBEEFu;
  if ((mask >> lane) & 1u) {
    const uint32_t v = x[32 * w + lane];
    const int pred = v & 1u;
    const unsigned key = v >> 1;
    r[0] = __ballot_sync(mask, pred);
    r[1] = (uint32_t)__any_sync(mask, pred);
    r[2] = (uint32_t)__all_sync(mask, pred);
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
    r[3] = __match_any_sync(mask, key);
    int p = 0;
    r[4] = __match_all_sync(mask, key, &p);
    r[5] = (uint32_t)p;
#endif
  }
  for (int i = 0; i < 6; ++i) out[(32 * w + lane) * 6 + i] = r[i];
}

EXPORT int wc_vote(int V, const uint32_t* masks, const uint32_t* x, uint32_t* out) {
  Dev dm, dx, dout;
  if (dm.up(masks, 4 * (size_t)V) || dx.up(x, 128 * (size_t)V) || dout.alloc(128 * 6 * (size_t)V)) return -1;
  if (V) k_vote<<<V, 32>>>(dm.as<uint32_t>(), dx.as<uint32_t>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 128 * 6 * (size_t)V);
}

// ---------------------------------------------------------------------------------------
// DPX (native instructions on sm_90, emulated by the CUDA headers elsewhere).

__global__ void k_dpx(int n, const uint32_t* A, const uint32_t* B, const uint32_t* C, uint32_t* out,
                      uint32_t* pred) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned a = A[i], b = B[i], c = C[i];
  const int sa = (int)a, sb = (int)b, sc = (int)c;
  uint32_t o[36];
  bool p[12];
  o[0] = (uint32_t)__vimax3_s32(sa, sb, sc);
  o[1] = __vimax3_s16x2(a, b, c);
  o[2] = __vimax3_u32(a, b, c);
  o[3] = __vimax3_u16x2(a, b, c);
  o[4] = (uint32_t)__vimin3_s32(sa, sb, sc);
  o[5] = __vimin3_s16x2(a, b, c);
  o[6] = __vimin3_u32(a, b, c);
  o[7] = __vimin3_u16x2(a, b, c);
  o[8] = (uint32_t)__vimax_s32_relu(sa, sb);
  o[9] = __vimax_s16x2_relu(a, b);
  o[10] = (uint32_t)__vimin_s32_relu(sa, sb);
  o[11] = __vimin_s16x2_relu(a, b);
  o[12] = (uint32_t)__vimax3_s32_relu(sa, sb, sc);
  o[13] = __vimax3_s16x2_relu(a, b, c);
  o[14] = (uint32_t)__vimin3_s32_relu(sa, sb, sc);
  o[15] = __vimin3_s16x2_relu(a, b, c);
  o[16] = (uint32_t)__vibmax_s32(sa, sb, &p[0]);
  o[17] = __vibmax_u32(a, b, &p[1]);
  o[18] = __vibmax_s16x2(a, b, &p[2], &p[3]);
  o[19] = __vibmax_u16x2(a, b, &p[4], &p[5]);
  o[20] = (uint32_t)__vibmin_s32(sa, sb, &p[6]);
  o[21] = __vibmin_u32(a, b, &p[7]);
  o[22] = __vibmin_s16x2(a, b, &p[8], &p[9]);
  o[23] = __vibmin_u16x2(a, b, &p[10], &p[11]);
  o[24] = (uint32_t)__viaddmax_s32(sa, sb, sc);
  o[25] = __viaddmax_s16x2(a, b, c);
  o[26] = __viaddmax_u32(a, b, c);
  o[27] = __viaddmax_u16x2(a, b, c);
  o[28] = (uint32_t)__viaddmin_s32(sa, sb, sc);
  o[29] = __viaddmin_s16x2(a, b, c);
  o[30] = __viaddmin_u32(a, b, c);
  o[31] = __viaddmin_u16x2(a, b, c);
  o[32] = (uint32_t)__viaddmax_s32_relu(sa, sb, sc);
  o[33] = __viaddmax_s16x2_relu(a, b, c);
  o[34] = (uint32_t)__viaddmin_s32_relu(sa, sb, sc);
  o[35] = __viaddmin_s16x2_relu(a, b, c);
  for (int j = 0; j < 36; ++j) out[(size_t)j * n + i] = o[j];
  for (int j = 0; j < 12; ++j) pred[(size_t)j * n + i] = p[j] ? 1u : 0u;
}

EXPORT int wc_dpx(int n, const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
                  uint32_t* pred) {
  Dev da, db, dc, dout, dp;
  const size_t s = 4 * (size_t)n;
  if (da.up(a, s) || db.up(b, s) || dc.up(c, s) || dout.alloc(36 * s) || dp.alloc(12 * s)) return -1;
  if (n) k_dpx<<<(n + 127) / 128, 128>>>(n, da.as<uint32_t>(), db.as<uint32_t>(), dc.as<uint32_t>(),
                                         dout.as<uint32_t>(), dp.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 36 * s) || dp.down(pred, 12 * s) ? -1 : 0;
}

// ---------------------------------------------------------------------------------------
// Conversions. out (5, n).

__global__ void k_cvt(int n, const uint32_t* x, uint32_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float f = __uint_as_float(x[i]);
  out[0 * (size_t)n + i] = __half_as_ushort(__float2half_rn(f));
  out[1 * (size_t)n + i] = __bfloat16_as_ushort(__float2bfloat16_rn(f));
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  out[2 * (size_t)n + i] = __float_as_uint(wmma::__float_to_tf32(f));
#else
  out[2 * (size_t)n + i] = 0xDEADBEEFu;
#endif
  out[3 * (size_t)n + i] = __half_as_ushort(__float2half_rz(f));
  out[4 * (size_t)n + i] = __bfloat16_as_ushort(__float2bfloat16_rz(f));
}

EXPORT int wc_cvt(int n, const uint32_t* x, uint32_t* out) {
  Dev dx, dout;
  if (dx.up(x, 4 * (size_t)n) || dout.alloc(20 * (size_t)n)) return -1;
  if (n) k_cvt<<<(n + 127) / 128, 128>>>(n, dx.as<uint32_t>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, 20 * (size_t)n);
}

// ---------------------------------------------------------------------------------------
// WMMA. Element types are tags so that kernels for types an architecture lacks still
// compile (their bodies are discarded with if constexpr).

enum Tag { T_F16, T_BF16, T_TF32, T_F64, T_S8, T_U8, T_S4, T_U4, T_B1, T_F32, T_S32 };
enum Op { OP_PLAIN, OP_SAT, OP_CVT, OP_XOR, OP_AND };

template <int TAG>
struct wt {
  static constexpr bool ok = false;
};
template <>
struct wt<T_F16> {
  static constexpr bool ok = true;
  using frag = __half;
  using mem = __half;
};
template <>
struct wt<T_F32> {
  static constexpr bool ok = true;
  using frag = float;
  using mem = float;
};
#ifdef WC_IMMA
template <>
struct wt<T_S8> {
  static constexpr bool ok = true;
  using frag = signed char;
  using mem = signed char;
};
template <>
struct wt<T_U8> {
  static constexpr bool ok = true;
  using frag = unsigned char;
  using mem = unsigned char;
};
template <>
struct wt<T_S32> {
  static constexpr bool ok = true;
  using frag = int;
  using mem = int;
};
#endif
#ifdef WC_SUBBYTE
template <>
struct wt<T_S4> {
  static constexpr bool ok = true;
  using frag = wmma::experimental::precision::s4;
  using mem = void;
};
template <>
struct wt<T_U4> {
  static constexpr bool ok = true;
  using frag = wmma::experimental::precision::u4;
  using mem = void;
};
template <>
struct wt<T_B1> {
  static constexpr bool ok = true;
  using frag = wmma::experimental::precision::b1;
  using mem = void;
};
#endif
#ifdef WC_AMPERE
template <>
struct wt<T_BF16> {
  static constexpr bool ok = true;
  using frag = __nv_bfloat16;
  using mem = __nv_bfloat16;
};
template <>
struct wt<T_TF32> {
  static constexpr bool ok = true;
  using frag = wmma::precision::tf32;
  using mem = float;
};
template <>
struct wt<T_F64> {
  static constexpr bool ok = true;
  using frag = double;
  using mem = double;
};
#endif

#ifdef __CUDA_ARCH__
#define WC_ARCH __CUDA_ARCH__
#else
#define WC_ARCH 100000
#endif

// Whether this compilation pass has fragments of this element type and k (the m16n16k8 and
// m8n8k4 shapes came with sm_80, m8n8k32 and m8n8k128 with sm_75).
template <int TAG, int K>
__host__ __device__ constexpr bool avail() {
  return wt<TAG>::ok && WC_ARCH >= ((K == 8 || K == 4) ? 800 : (K == 32 || K == 128) ? 750 : 700);
}

template <class T>
__device__ T to_tf32(T x) {
#ifdef WC_AMPERE
  return wmma::__float_to_tf32(x);
#else
  return x;
#endif
}

template <int L>
using lay_t = typename std::conditional<L == 1, wmma::row_major, wmma::col_major>::type;

static int min_arch(int tag) {
  switch (tag) {
    case T_F16: case T_F32: return 70;
    case T_S8: case T_U8: case T_S32: return 72;
    case T_S4: case T_U4: case T_B1: return 75;
    default: return 80;
  }
}

// The shapes m16n16k8 (tf32) and m8n8k4 (f64) came with sm_80, m8n8k32 / m8n8k128 with sm_75.
static int shape_arch(int m, int n, int k) {
  if (k == 8 || k == 4) return 80;
  if (k == 32 || k == 128) return 75;
  return 70;
}
static int need_arch(int tag, int m, int n, int k) {
  const int a = min_arch(tag), b = shape_arch(m, n, k);
  return a > b ? a : b;
}

// One warp per trial. Pointers are bytes; s* are byte strides between trials. cl / dl: 1 for
// mem_row_major, 0 for mem_col_major (C load and D store).
template <int AT, int CT, int DT, int M, int N, int K, int LA, int LB, int OP>
__global__ void k_mma(int T, const char* A, long long sA, unsigned lda, const char* B, long long sB,
                      unsigned ldb, const char* C, long long sC, unsigned ldc, int cl, char* D,
                      long long sD, unsigned ldd, int dl) {
  const long long t = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (t >= T) return;
  if constexpr (avail<AT, K>() && avail<CT, K>() && avail<DT, K>() && (OP != OP_AND || WC_ARCH >= 800)) {
    using AF = typename wt<AT>::frag;
    using AM = typename wt<AT>::mem;
    using CM = typename wt<CT>::mem;
    using DM = typename wt<DT>::mem;
    wmma::fragment<wmma::matrix_a, M, N, K, AF, lay_t<LA>> a;
    wmma::fragment<wmma::matrix_b, M, N, K, AF, lay_t<LB>> b;
    wmma::fragment<wmma::accumulator, M, N, K, typename wt<CT>::frag> c;
    wmma::fragment<wmma::accumulator, M, N, K, typename wt<DT>::frag> d;
    wmma::load_matrix_sync(a, (const AM*)(A + t * sA), lda);
    wmma::load_matrix_sync(b, (const AM*)(B + t * sB), ldb);
    wmma::load_matrix_sync(c, (const CM*)(C + t * sC), ldc, cl ? wmma::mem_row_major : wmma::mem_col_major);
    if constexpr (OP == OP_CVT) {
      for (int i = 0; i < a.num_elements; ++i) a.x[i] = to_tf32(a.x[i]);
      for (int i = 0; i < b.num_elements; ++i) b.x[i] = to_tf32(b.x[i]);
    }
    if constexpr (OP == OP_XOR || OP == OP_AND) {
      // bmmaBitOpXOR = 1, bmmaBitOpAND = 2 (AND needs sm_80; spelled as a number so that
      // older passes, whose enum lacks it, still compile).
      wmma::bmma_sync(d, a, b, c, static_cast<wmma::experimental::bmmaBitOp>(OP == OP_AND ? 2 : 1),
                      wmma::experimental::bmmaAccumulateOpPOPC);
    } else if constexpr (OP == OP_SAT) {
      wmma::mma_sync(d, a, b, c, true);
    } else {
      wmma::mma_sync(d, a, b, c);
    }
    wmma::store_matrix_sync((DM*)(D + t * sD), d, ldd, dl ? wmma::mem_row_major : wmma::mem_col_major);
  }
}

typedef void (*mma_kernel_t)(int, const char*, long long, unsigned, const char*, long long, unsigned,
                             const char*, long long, unsigned, int, char*, long long, unsigned, int);

struct MmaCfg {
  const char* name;
  int at, ct, dt, m, n, k, la, lb, op;
  mma_kernel_t kern;
};

// The table of every WMMA configuration: name, A/B tag, C tag, D tag, m, n, k, A layout,
// B layout (1 row, 0 col), op. Names follow docs/capture_format.md.
#define MMA_X(name, AT, CT, DT, M, N, K, LA, LB, OP) \
  {name, AT, CT, DT, M, N, K, LA, LB, OP, k_mma<AT, CT, DT, M, N, K, LA, LB, OP>},
#define L4(X, pre, AT, CT, DT, M, N, K, shp, OP)      \
  X(pre "." shp ".rr", AT, CT, DT, M, N, K, 1, 1, OP) \
  X(pre "." shp ".rc", AT, CT, DT, M, N, K, 1, 0, OP) \
  X(pre "." shp ".cr", AT, CT, DT, M, N, K, 0, 1, OP) \
  X(pre "." shp ".cc", AT, CT, DT, M, N, K, 0, 0, OP)
#define S3(X, pre, AT, CT, DT, OP)                           \
  L4(X, pre, AT, CT, DT, 16, 16, 16, "m16n16k16", OP)        \
  L4(X, pre, AT, CT, DT, 32, 8, 16, "m32n8k16", OP)          \
  L4(X, pre, AT, CT, DT, 8, 32, 16, "m8n32k16", OP)
#define MMA_TABLE(X)                                                               \
  S3(X, "f16.f32f32", T_F16, T_F32, T_F32, OP_PLAIN)                               \
  S3(X, "f16.f16f16", T_F16, T_F16, T_F16, OP_PLAIN)                               \
  S3(X, "f16.f16f32", T_F16, T_F16, T_F32, OP_PLAIN)                               \
  S3(X, "f16.f32f16", T_F16, T_F32, T_F16, OP_PLAIN)                               \
  S3(X, "bf16.f32f32", T_BF16, T_F32, T_F32, OP_PLAIN)                             \
  L4(X, "tf32.f32f32", T_TF32, T_F32, T_F32, 16, 16, 8, "m16n16k8", OP_PLAIN)      \
  L4(X, "tf32cvt.f32f32", T_TF32, T_F32, T_F32, 16, 16, 8, "m16n16k8", OP_CVT)     \
  L4(X, "f64.f64f64", T_F64, T_F64, T_F64, 8, 8, 4, "m8n8k4", OP_PLAIN)            \
  S3(X, "s8.s32s32", T_S8, T_S32, T_S32, OP_PLAIN)                                 \
  S3(X, "s8sat.s32s32", T_S8, T_S32, T_S32, OP_SAT)                                \
  S3(X, "u8.s32s32", T_U8, T_S32, T_S32, OP_PLAIN)                                 \
  S3(X, "u8sat.s32s32", T_U8, T_S32, T_S32, OP_SAT)                                \
  X("s4.s32s32.m8n8k32.rc", T_S4, T_S32, T_S32, 8, 8, 32, 1, 0, OP_PLAIN)          \
  X("s4sat.s32s32.m8n8k32.rc", T_S4, T_S32, T_S32, 8, 8, 32, 1, 0, OP_SAT)         \
  X("u4.s32s32.m8n8k32.rc", T_U4, T_S32, T_S32, 8, 8, 32, 1, 0, OP_PLAIN)          \
  X("u4sat.s32s32.m8n8k32.rc", T_U4, T_S32, T_S32, 8, 8, 32, 1, 0, OP_SAT)         \
  X("b1xor.s32s32.m8n8k128.rc", T_B1, T_S32, T_S32, 8, 8, 128, 1, 0, OP_XOR)       \
  X("b1and.s32s32.m8n8k128.rc", T_B1, T_S32, T_S32, 8, 8, 128, 1, 0, OP_AND)

static const MmaCfg g_mma[] = {MMA_TABLE(MMA_X)};
static const int g_n_mma = sizeof(g_mma) / sizeof(g_mma[0]);

EXPORT int wc_mma_count() { return g_n_mma; }

// info: at, ct, dt, m, n, k, la, lb, op, min_arch (the tag numbers are those of enum Tag).
EXPORT const char* wc_mma_info(int i, int* info) {
  if (i < 0 || i >= g_n_mma) return nullptr;
  const MmaCfg& c = g_mma[i];
  int a = need_arch(c.at, c.m, c.n, c.k);
  int v[10] = {c.at, c.ct, c.dt, c.m, c.n, c.k, c.la, c.lb, c.op, a};
  memcpy(info, v, sizeof v);
  return c.name;
}

// Runs T trials of configuration i. Buffers are host bytes: A (nA bytes), trial t at byte
// offA + t*sA, and so on; D is copied in first (so that untouched bytes keep the caller's
// sentinel) and back out.
EXPORT int wc_mma(int i, int T, const void* A, long long nA, long long offA, long long sA, unsigned lda,
                  const void* B, long long nB, long long offB, long long sB, unsigned ldb, const void* C,
                  long long nC, long long offC, long long sC, unsigned ldc, int cl, void* D, long long nD,
                  long long offD, long long sD, unsigned ldd, int dl) {
  if (i < 0 || i >= g_n_mma) {
    snprintf(g_err, sizeof g_err, "wc_mma: no configuration %d", i);
    return -1;
  }
  const MmaCfg& c = g_mma[i];
  if (g_cc >= 0 && g_cc < need_arch(c.at, c.m, c.n, c.k)) return -2;
  Dev da, db, dc, dd;
  if (da.up(A, nA) || db.up(B, nB) || dc.up(C, nC) || dd.up(D, nD)) return -1;
  const int wpb = 4;
  if (T)
    c.kern<<<(T + wpb - 1) / wpb, 32 * wpb>>>(T, da.as<char>() + offA, sA, lda, db.as<char>() + offB, sB, ldb,
                                             dc.as<char>() + offC, sC, ldc, cl, dd.as<char>() + offD, sD, ldd, dl);
  if (finish()) return -1;
  return dd.down(D, nD);
}

// ---------------------------------------------------------------------------------------
// Fragment layouts. For each fragment kind: load P matrices (one per warp) and write every
// storage element frag.x[i] of every lane as raw bits widened to uint64: out (P, 32, NE).

template <int USE, int TAG, int M, int N, int K, int L>
struct FragOf;
template <int TAG, int M, int N, int K, int L>
struct FragOf<0, TAG, M, N, K, L> {
  using type = wmma::fragment<wmma::matrix_a, M, N, K, typename wt<TAG>::frag, lay_t<L>>;
};
template <int TAG, int M, int N, int K, int L>
struct FragOf<1, TAG, M, N, K, L> {
  using type = wmma::fragment<wmma::matrix_b, M, N, K, typename wt<TAG>::frag, lay_t<L>>;
};
template <int TAG, int M, int N, int K, int L>
struct FragOf<2, TAG, M, N, K, L> {
  using type = wmma::fragment<wmma::accumulator, M, N, K, typename wt<TAG>::frag>;
};

template <int USE, int TAG, int M, int N, int K, int L>
__global__ void k_layout(int P, const char* buf, long long stride, unsigned ldm, int ml, uint64_t* out) {
  const int p = blockIdx.x, lane = threadIdx.x;
  if (p >= P) return;
  if constexpr (avail<TAG, K>()) {
    using F = typename FragOf<USE, TAG, M, N, K, L>::type;
    using MT = typename wt<TAG>::mem;
    F f;
    if constexpr (USE == 2)
      wmma::load_matrix_sync(f, (const MT*)(buf + p * stride), ldm, ml ? wmma::mem_row_major : wmma::mem_col_major);
    else
      wmma::load_matrix_sync(f, (const MT*)(buf + p * stride), ldm);
    for (int i = 0; i < f.num_storage_elements; ++i) {
      uint64_t v = 0;
      memcpy(&v, &f.x[i], sizeof(f.x[i]));
      out[((size_t)p * 32 + lane) * f.num_storage_elements + i] = v;
    }
  }
}

// Accumulator stores: x[i] of lane l holds the number l*NE + i + 1 (exact in every accumulator
// type), stored with store_matrix_sync to buf + p*stride.
template <int USE, int TAG, int M, int N, int K, int L>
__global__ void k_store(int P, char* buf, long long stride, unsigned ldm, int ml) {
  const int p = blockIdx.x, lane = threadIdx.x;
  if (p >= P) return;
  if constexpr (USE == 2 && avail<TAG, K>()) {
    using F = typename FragOf<USE, TAG, M, N, K, L>::type;
    using MT = typename wt<TAG>::mem;
    F f;
    for (int i = 0; i < f.num_elements; ++i) {
      const int v = lane * f.num_elements + i + 1;
      if constexpr (TAG == T_F16)
        f.x[i] = __int2half_rn(v);
      else
        f.x[i] = (typename wt<TAG>::frag)v;
    }
    wmma::store_matrix_sync((MT*)(buf + p * stride), f, ldm, ml ? wmma::mem_row_major : wmma::mem_col_major);
  }
}

// Storage elements (what=0) or elements (what=1) per lane; 0 where this pass lacks the type.
template <int USE, int TAG, int M, int N, int K, int L>
__host__ __device__ constexpr int frag_count(int what) {
  if constexpr (avail<TAG, K>()) {
    using F = typename FragOf<USE, TAG, M, N, K, L>::type;
    return what == 0 ? (int)F::num_storage_elements : (int)F::num_elements;
  } else {
    return 0;
  }
}

typedef void (*layout_kernel_t)(int, const char*, long long, unsigned, int, uint64_t*);
typedef void (*store_kernel_t)(int, char*, long long, unsigned, int);

struct LayoutCfg {
  const char* name;
  int use, tag, m, n, k, layout, ne, elems;  // ne storage elements per lane; elems per lane
  layout_kernel_t kern;
  store_kernel_t store;
};

#define LAY_X(name, USE, TAG, M, N, K, L)                                                   \
  {name, USE, TAG, M, N, K, L,                                                              \
   frag_count<USE, TAG, M, N, K, L>(0), frag_count<USE, TAG, M, N, K, L>(1),                \
   k_layout<USE, TAG, M, N, K, L>, k_store<USE, TAG, M, N, K, L>},
#define LAB(X, ty, TAG, M, N, K, shp)                       \
  X("a." ty "." shp ".r", 0, TAG, M, N, K, 1)               \
  X("a." ty "." shp ".c", 0, TAG, M, N, K, 0)               \
  X("b." ty "." shp ".r", 1, TAG, M, N, K, 1)               \
  X("b." ty "." shp ".c", 1, TAG, M, N, K, 0)
#define LAB3(X, ty, TAG)                                    \
  LAB(X, ty, TAG, 16, 16, 16, "m16n16k16")                  \
  LAB(X, ty, TAG, 32, 8, 16, "m32n8k16")                    \
  LAB(X, ty, TAG, 8, 32, 16, "m8n32k16")
#define LAYOUT_TABLE(X)                                     \
  LAB3(X, "f16", T_F16)                                     \
  LAB3(X, "bf16", T_BF16)                                   \
  LAB3(X, "s8", T_S8)                                       \
  LAB3(X, "u8", T_U8)                                       \
  LAB(X, "tf32", T_TF32, 16, 16, 8, "m16n16k8")             \
  LAB(X, "f64", T_F64, 8, 8, 4, "m8n8k4")                   \
  X("a.s4.m8n8k32.r", 0, T_S4, 8, 8, 32, 1)                 \
  X("b.s4.m8n8k32.c", 1, T_S4, 8, 8, 32, 0)                 \
  X("a.u4.m8n8k32.r", 0, T_U4, 8, 8, 32, 1)                 \
  X("b.u4.m8n8k32.c", 1, T_U4, 8, 8, 32, 0)                 \
  X("a.b1.m8n8k128.r", 0, T_B1, 8, 8, 128, 1)               \
  X("b.b1.m8n8k128.c", 1, T_B1, 8, 8, 128, 0)               \
  X("c.f32.m16n16k16", 2, T_F32, 16, 16, 16, 1)             \
  X("c.f32.m32n8k16", 2, T_F32, 32, 8, 16, 1)               \
  X("c.f32.m8n32k16", 2, T_F32, 8, 32, 16, 1)               \
  X("c.f32.m16n16k8", 2, T_F32, 16, 16, 8, 1)               \
  X("c.f16.m16n16k16", 2, T_F16, 16, 16, 16, 1)             \
  X("c.f16.m32n8k16", 2, T_F16, 32, 8, 16, 1)               \
  X("c.f16.m8n32k16", 2, T_F16, 8, 32, 16, 1)               \
  X("c.s32.m16n16k16", 2, T_S32, 16, 16, 16, 1)             \
  X("c.s32.m32n8k16", 2, T_S32, 32, 8, 16, 1)               \
  X("c.s32.m8n32k16", 2, T_S32, 8, 32, 16, 1)               \
  X("c.s32.m8n8k32", 2, T_S32, 8, 8, 32, 1)                 \
  X("c.s32.m8n8k128", 2, T_S32, 8, 8, 128, 1)               \
  X("c.f64.m8n8k4", 2, T_F64, 8, 8, 4, 1)

static const LayoutCfg g_lay[] = {LAYOUT_TABLE(LAY_X)};
static const int g_n_lay = sizeof(g_lay) / sizeof(g_lay[0]);

EXPORT int wc_layout_count() { return g_n_lay; }

// info: use (0 a, 1 b, 2 c), tag, m, n, k, layout (1 row, 0 col), NE (storage elements per
// lane), elements per lane, min_arch.
EXPORT const char* wc_layout_info(int i, int* info) {
  if (i < 0 || i >= g_n_lay) return nullptr;
  const LayoutCfg& c = g_lay[i];
  int v[9] = {c.use, c.tag, c.m, c.n, c.k, c.layout, c.ne, c.elems, need_arch(c.tag, c.m, c.n, c.k)};
  memcpy(info, v, sizeof v);
  return c.name;
}

// Loads P matrices: plane p at byte off + p*stride of buf (nbuf bytes), leading dimension ldm
// (elements), ml the memory layout for accumulators. out: (P, 32, NE) uint64.
EXPORT int wc_layout(int i, int P, const void* buf, long long nbuf, long long off, long long stride,
                     unsigned ldm, int ml, uint64_t* out) {
  if (i < 0 || i >= g_n_lay) return -1;
  const LayoutCfg& c = g_lay[i];
  if (g_cc >= 0 && g_cc < need_arch(c.tag, c.m, c.n, c.k)) return -2;
  Dev db, dout;
  const size_t no = (size_t)P * 32 * c.ne * 8;
  if (db.up(buf, nbuf) || dout.alloc(no)) return -1;
  if (P) c.kern<<<P, 32>>>(P, db.as<char>() + off, stride, ldm, ml, dout.as<uint64_t>());
  if (finish()) return -1;
  return dout.down(out, no);
}

// Stores P accumulator fragments (see k_store) into buf (nbuf bytes, copied in and out, so the
// caller's sentinel shows which bytes were written).
EXPORT int wc_store(int i, int P, void* buf, long long nbuf, long long off, long long stride, unsigned ldm,
                    int ml) {
  if (i < 0 || i >= g_n_lay) return -1;
  const LayoutCfg& c = g_lay[i];
  if (c.use != 2) {
    snprintf(g_err, sizeof g_err, "wc_store: %s is not an accumulator", c.name);
    return -1;
  }
  if (g_cc >= 0 && g_cc < need_arch(c.tag, c.m, c.n, c.k)) return -2;
  Dev db;
  if (db.up(buf, nbuf)) return -1;
  if (P) c.store<<<P, 32>>>(P, db.as<char>() + off, stride, ldm, ml);
  if (finish()) return -1;
  return db.down(buf, nbuf);
}
