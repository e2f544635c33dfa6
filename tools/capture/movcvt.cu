// movcvt.cu: kernels that record what the GPU returns for the fp8 conversions (PTX cvt and
// the cuda_fp8.h intrinsics) and for the warp data-movement instructions ldmatrix, stmatrix
// and movmatrix. Driven from tools/capture/capture_movcvt.py through ctypes; the formats of
// its output files are in FORMAT_MOVCVT.md.
//
// Build (capture_movcvt.py does this, once per part):
//   nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a \
//        -DMC_PART_CVT [-DMC_OK_<i> ...] -o libmovcvt_cvt.so movcvt.cu
//   nvcc ... -DMC_PART_LDM -o libmovcvt_ldm.so movcvt.cu
// Each PTX cvt form i is compiled only when MC_OK_<i> is defined: capture_movcvt.py first asks
// ptxas whether it accepts the form for the target and records the message when it does not.
//
// Every entry point takes host arrays, copies them to the device, launches one kernel and
// copies the results back; it returns 0 on success, -1 on a CUDA error (message in
// mc_last_error()) and -2 when the form was not compiled in. Everything is raw bits.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common.cuh"

CAPTURE_LAST_ERROR(mc)

CAPTURE_DEVICE(mc)

// The __CUDA_ARCH__ the kernels were compiled for.
__global__ void k_arch(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}
EXPORT int mc_compiled_arch(int* arch) {
  Dev d;
  if (d.alloc(4)) return -1;
  k_arch<<<1, 1>>>(d.as<int>());
  if (finish()) return -1;
  return d.down(arch, 4);
}

// =======================================================================================
#ifdef MC_PART_CVT
// fp8 conversions. One thread per element. a and b are the two inputs widened to 32 bits
// (b only for the two-input forms), y the output widened to 32 bits.
//
// The op numbers and names MUST match CVT_OPS in capture_movcvt.py (checked at load time
// through mc_cvt_name). PTX forms are 0..19, intrinsics 20.., see the table below.

#define MC_NCVT 48

static const char* const kCvtNames[MC_NCVT] = {
    // PTX, two f32 sources (d, a, b): a -> upper byte of d per the PTX ISA.
    "cvt.rn.satfinite.e4m3x2.f32",         // 0
    "cvt.rn.satfinite.e5m2x2.f32",         // 1
    "cvt.rn.satfinite.relu.e4m3x2.f32",    // 2
    "cvt.rn.satfinite.relu.e5m2x2.f32",    // 3
    "cvt.rn.e4m3x2.f32",                   // 4  (not accepted by ptxas 13.0: .satfinite required)
    "cvt.rn.e5m2x2.f32",                   // 5
    // PTX, one f16x2 source.
    "cvt.rn.satfinite.e4m3x2.f16x2",       // 6
    "cvt.rn.satfinite.e5m2x2.f16x2",       // 7
    "cvt.rn.satfinite.relu.e4m3x2.f16x2",  // 8
    "cvt.rn.satfinite.relu.e5m2x2.f16x2",  // 9
    "cvt.rn.e4m3x2.f16x2",                 // 10 (not accepted by ptxas 13.0)
    "cvt.rn.e5m2x2.f16x2",                 // 11
    // PTX, one bf16x2 source (sm_100+ only, probed).
    "cvt.rn.satfinite.e4m3x2.bf16x2",      // 12
    "cvt.rn.satfinite.e5m2x2.bf16x2",      // 13
    // PTX, fp8x2 -> f16x2 / bf16x2.
    "cvt.rn.f16x2.e4m3x2",                 // 14
    "cvt.rn.f16x2.e5m2x2",                 // 15
    "cvt.rn.relu.f16x2.e4m3x2",            // 16
    "cvt.rn.relu.f16x2.e5m2x2",            // 17
    "cvt.rn.bf16x2.e4m3x2",                // 18 (not a PTX form on sm_90; probed)
    "cvt.rn.bf16x2.e5m2x2",                // 19
    // cuda_fp8.h intrinsics.
    "nv_cvt_float_to_fp8.e4m3.satfinite",          // 20
    "nv_cvt_float_to_fp8.e4m3.nosat",              // 21
    "nv_cvt_float_to_fp8.e5m2.satfinite",          // 22
    "nv_cvt_float_to_fp8.e5m2.nosat",              // 23
    "nv_cvt_float2_to_fp8x2.e4m3.satfinite",       // 24
    "nv_cvt_float2_to_fp8x2.e4m3.nosat",           // 25
    "nv_cvt_float2_to_fp8x2.e5m2.satfinite",       // 26
    "nv_cvt_float2_to_fp8x2.e5m2.nosat",           // 27
    "nv_cvt_halfraw_to_fp8.e4m3.satfinite",        // 28
    "nv_cvt_halfraw_to_fp8.e4m3.nosat",            // 29
    "nv_cvt_halfraw_to_fp8.e5m2.satfinite",        // 30
    "nv_cvt_halfraw_to_fp8.e5m2.nosat",            // 31
    "nv_cvt_halfraw2_to_fp8x2.e4m3.satfinite",     // 32
    "nv_cvt_halfraw2_to_fp8x2.e4m3.nosat",         // 33
    "nv_cvt_halfraw2_to_fp8x2.e5m2.satfinite",     // 34
    "nv_cvt_halfraw2_to_fp8x2.e5m2.nosat",         // 35
    "nv_cvt_bfloat16raw_to_fp8.e4m3.satfinite",    // 36
    "nv_cvt_bfloat16raw_to_fp8.e4m3.nosat",        // 37
    "nv_cvt_bfloat16raw_to_fp8.e5m2.satfinite",    // 38
    "nv_cvt_bfloat16raw_to_fp8.e5m2.nosat",        // 39
    "nv_cvt_bfloat16raw2_to_fp8x2.e4m3.satfinite", // 40
    "nv_cvt_bfloat16raw2_to_fp8x2.e4m3.nosat",     // 41
    "nv_cvt_bfloat16raw2_to_fp8x2.e5m2.satfinite", // 42
    "nv_cvt_bfloat16raw2_to_fp8x2.e5m2.nosat",     // 43
    "nv_cvt_fp8_to_halfraw.e4m3",                  // 44
    "nv_cvt_fp8_to_halfraw.e5m2",                  // 45
    "nv_cvt_fp8x2_to_halfraw2.e4m3",               // 46
    "nv_cvt_fp8x2_to_halfraw2.e5m2",               // 47
};

EXPORT int mc_cvt_count() { return MC_NCVT; }
EXPORT const char* mc_cvt_name(int op) { return (op >= 0 && op < MC_NCVT) ? kCvtNames[op] : ""; }

// Which PTX forms this build contains (the intrinsics are always there).
EXPORT int mc_cvt_compiled(int op) {
  switch (op) {
#define HAVE(i) \
  case i:       \
    return 1;
#ifdef MC_OK_0
    HAVE(0)
#endif
#ifdef MC_OK_1
    HAVE(1)
#endif
#ifdef MC_OK_2
    HAVE(2)
#endif
#ifdef MC_OK_3
    HAVE(3)
#endif
#ifdef MC_OK_4
    HAVE(4)
#endif
#ifdef MC_OK_5
    HAVE(5)
#endif
#ifdef MC_OK_6
    HAVE(6)
#endif
#ifdef MC_OK_7
    HAVE(7)
#endif
#ifdef MC_OK_8
    HAVE(8)
#endif
#ifdef MC_OK_9
    HAVE(9)
#endif
#ifdef MC_OK_10
    HAVE(10)
#endif
#ifdef MC_OK_11
    HAVE(11)
#endif
#ifdef MC_OK_12
    HAVE(12)
#endif
#ifdef MC_OK_13
    HAVE(13)
#endif
#ifdef MC_OK_14
    HAVE(14)
#endif
#ifdef MC_OK_15
    HAVE(15)
#endif
#ifdef MC_OK_16
    HAVE(16)
#endif
#ifdef MC_OK_17
    HAVE(17)
#endif
#ifdef MC_OK_18
    HAVE(18)
#endif
#ifdef MC_OK_19
    HAVE(19)
#endif
#undef HAVE
    default:
      return op >= 20 && op < MC_NCVT;
  }
}

// Inline-PTX helpers: NAME is the instruction text, identical to the table entry.
#define PTX_F32PAIR(NAME)                                                      \
  {                                                                            \
    uint16_t d;                                                                \
    asm volatile(NAME " %0, %1, %2;" : "=h"(d) : "f"(fa), "f"(fb));            \
    r = d;                                                                     \
  }
#define PTX_X2(NAME)                                                           \
  {                                                                            \
    uint16_t d;                                                                \
    asm volatile(NAME " %0, %1;" : "=h"(d) : "r"(a));                          \
    r = d;                                                                     \
  }
#define PTX_FROM8(NAME)                                                        \
  {                                                                            \
    uint32_t d;                                                                \
    asm volatile(NAME " %0, %1;" : "=r"(d) : "h"((uint16_t)a));                \
    r = d;                                                                     \
  }

__device__ __forceinline__ uint32_t h2w(__half2_raw h) {
  uint32_t w;
  memcpy(&w, &h, 4);
  return w;
}

__global__ void k_cvt(int op, int n, const uint32_t* __restrict__ A, const uint32_t* __restrict__ B,
                      uint32_t* __restrict__ Y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t a = A[i], b = B[i];
  const float fa = __uint_as_float(a), fb = __uint_as_float(b);
  uint32_t r = 0xDEADBEEFu;
  const __nv_saturation_t SAT = __NV_SATFINITE, NOSAT = __NV_NOSAT;
  const __nv_fp8_interpretation_t E4 = __NV_E4M3, E5 = __NV_E5M2;
  __half_raw h;
  h.x = (unsigned short)a;
  __half2_raw h2;
  h2.x = (unsigned short)(a & 0xFFFFu);
  h2.y = (unsigned short)(a >> 16);
  __nv_bfloat16_raw bh;
  bh.x = (unsigned short)a;
  __nv_bfloat162_raw bh2;
  bh2.x = (unsigned short)(a & 0xFFFFu);
  bh2.y = (unsigned short)(a >> 16);
  const float2 f2 = make_float2(fa, fb);  // column 0 of x is .x, column 1 is .y
  switch (op) {
#ifdef MC_OK_0
    case 0: PTX_F32PAIR("cvt.rn.satfinite.e4m3x2.f32") break;
#endif
#ifdef MC_OK_1
    case 1: PTX_F32PAIR("cvt.rn.satfinite.e5m2x2.f32") break;
#endif
#ifdef MC_OK_2
    case 2: PTX_F32PAIR("cvt.rn.satfinite.relu.e4m3x2.f32") break;
#endif
#ifdef MC_OK_3
    case 3: PTX_F32PAIR("cvt.rn.satfinite.relu.e5m2x2.f32") break;
#endif
#ifdef MC_OK_4
    case 4: PTX_F32PAIR("cvt.rn.e4m3x2.f32") break;
#endif
#ifdef MC_OK_5
    case 5: PTX_F32PAIR("cvt.rn.e5m2x2.f32") break;
#endif
#ifdef MC_OK_6
    case 6: PTX_X2("cvt.rn.satfinite.e4m3x2.f16x2") break;
#endif
#ifdef MC_OK_7
    case 7: PTX_X2("cvt.rn.satfinite.e5m2x2.f16x2") break;
#endif
#ifdef MC_OK_8
    case 8: PTX_X2("cvt.rn.satfinite.relu.e4m3x2.f16x2") break;
#endif
#ifdef MC_OK_9
    case 9: PTX_X2("cvt.rn.satfinite.relu.e5m2x2.f16x2") break;
#endif
#ifdef MC_OK_10
    case 10: PTX_X2("cvt.rn.e4m3x2.f16x2") break;
#endif
#ifdef MC_OK_11
    case 11: PTX_X2("cvt.rn.e5m2x2.f16x2") break;
#endif
#ifdef MC_OK_12
    case 12: PTX_X2("cvt.rn.satfinite.e4m3x2.bf16x2") break;
#endif
#ifdef MC_OK_13
    case 13: PTX_X2("cvt.rn.satfinite.e5m2x2.bf16x2") break;
#endif
#ifdef MC_OK_14
    case 14: PTX_FROM8("cvt.rn.f16x2.e4m3x2") break;
#endif
#ifdef MC_OK_15
    case 15: PTX_FROM8("cvt.rn.f16x2.e5m2x2") break;
#endif
#ifdef MC_OK_16
    case 16: PTX_FROM8("cvt.rn.relu.f16x2.e4m3x2") break;
#endif
#ifdef MC_OK_17
    case 17: PTX_FROM8("cvt.rn.relu.f16x2.e5m2x2") break;
#endif
#ifdef MC_OK_18
    case 18: PTX_FROM8("cvt.rn.bf16x2.e4m3x2") break;
#endif
#ifdef MC_OK_19
    case 19: PTX_FROM8("cvt.rn.bf16x2.e5m2x2") break;
#endif
    case 20: r = __nv_cvt_float_to_fp8(fa, SAT, E4); break;
    case 21: r = __nv_cvt_float_to_fp8(fa, NOSAT, E4); break;
    case 22: r = __nv_cvt_float_to_fp8(fa, SAT, E5); break;
    case 23: r = __nv_cvt_float_to_fp8(fa, NOSAT, E5); break;
    case 24: r = __nv_cvt_float2_to_fp8x2(f2, SAT, E4); break;
    case 25: r = __nv_cvt_float2_to_fp8x2(f2, NOSAT, E4); break;
    case 26: r = __nv_cvt_float2_to_fp8x2(f2, SAT, E5); break;
    case 27: r = __nv_cvt_float2_to_fp8x2(f2, NOSAT, E5); break;
    case 28: r = __nv_cvt_halfraw_to_fp8(h, SAT, E4); break;
    case 29: r = __nv_cvt_halfraw_to_fp8(h, NOSAT, E4); break;
    case 30: r = __nv_cvt_halfraw_to_fp8(h, SAT, E5); break;
    case 31: r = __nv_cvt_halfraw_to_fp8(h, NOSAT, E5); break;
    case 32: r = __nv_cvt_halfraw2_to_fp8x2(h2, SAT, E4); break;
    case 33: r = __nv_cvt_halfraw2_to_fp8x2(h2, NOSAT, E4); break;
    case 34: r = __nv_cvt_halfraw2_to_fp8x2(h2, SAT, E5); break;
    case 35: r = __nv_cvt_halfraw2_to_fp8x2(h2, NOSAT, E5); break;
    case 36: r = __nv_cvt_bfloat16raw_to_fp8(bh, SAT, E4); break;
    case 37: r = __nv_cvt_bfloat16raw_to_fp8(bh, NOSAT, E4); break;
    case 38: r = __nv_cvt_bfloat16raw_to_fp8(bh, SAT, E5); break;
    case 39: r = __nv_cvt_bfloat16raw_to_fp8(bh, NOSAT, E5); break;
    case 40: r = __nv_cvt_bfloat16raw2_to_fp8x2(bh2, SAT, E4); break;
    case 41: r = __nv_cvt_bfloat16raw2_to_fp8x2(bh2, NOSAT, E4); break;
    case 42: r = __nv_cvt_bfloat16raw2_to_fp8x2(bh2, SAT, E5); break;
    case 43: r = __nv_cvt_bfloat16raw2_to_fp8x2(bh2, NOSAT, E5); break;
    case 44: r = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)a, E4).x; break;
    case 45: r = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)a, E5).x; break;
    case 46: r = h2w(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)a, E4)); break;
    case 47: r = h2w(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)a, E5)); break;
    default: break;
  }
  Y[i] = r;
}

// a, b: n words each (b is ignored by one-input forms but must be readable). y: n words.
EXPORT int mc_cvt(int op, int n, const uint32_t* a, const uint32_t* b, uint32_t* y) {
  if (!mc_cvt_compiled(op)) {
    snprintf(g_err, sizeof g_err, "cvt op %d (%s) is not compiled into this library", op,
             mc_cvt_name(op));
    return -2;
  }
  Dev da, db, dy;
  const size_t bytes = sizeof(uint32_t) * (size_t)n;
  if (da.up(a, bytes) || db.up(b, bytes) || dy.alloc(bytes)) return -1;
  if (n) k_cvt<<<(n + 255) / 256, 256>>>(op, n, da.as<uint32_t>(), db.as<uint32_t>(), dy.as<uint32_t>());
  if (finish()) return -1;
  return dy.down(y, bytes);
}
#endif  // MC_PART_CVT

// =======================================================================================
#ifdef MC_PART_LDM
// ldmatrix / stmatrix / movmatrix. One warp (one block of 32 threads) per trial. Each trial
// has its own shared-memory image of `nelem` uint16 words (a multiple of 8: rows of 16
// bytes), copied into dynamic shared memory, and one byte offset per lane (relative to the
// start of that shared buffer, which is 128-byte aligned).

template <int NUM, bool TRANS>
__device__ __forceinline__ void do_ldmatrix(uint32_t addr, uint32_t* r) {
  if constexpr (NUM == 1 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr) : "memory");
  else if constexpr (NUM == 1 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr) : "memory");
  else if constexpr (NUM == 2 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  else if constexpr (NUM == 2 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  else if constexpr (NUM == 4 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

template <int NUM, bool TRANS>
__device__ __forceinline__ void do_stmatrix(uint32_t addr, const uint32_t* r) {
  if constexpr (NUM == 1 && !TRANS)
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" :: "r"(addr), "r"(r[0]) : "memory");
  else if constexpr (NUM == 1 && TRANS)
    asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};" :: "r"(addr), "r"(r[0]) : "memory");
  else if constexpr (NUM == 2 && !TRANS)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]) : "memory");
  else if constexpr (NUM == 2 && TRANS)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]) : "memory");
  else if constexpr (NUM == 4 && !TRANS)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

// smem: (T, nelem) uint16; addr: (T, 32) int32; regs: (T, 32, NUM) uint32 out.
template <int NUM, bool TRANS>
__global__ void k_ldmatrix(int nelem, const uint16_t* __restrict__ smem, const int* __restrict__ addr,
                           uint32_t* __restrict__ regs) {
  extern __shared__ __align__(128) uint16_t sm[];
  const int t = blockIdx.x, lane = threadIdx.x;
  for (int i = lane; i < nelem; i += 32) sm[i] = smem[(size_t)t * nelem + i];
  __syncthreads();
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
  uint32_t r[4] = {0xDEADBEEFu, 0xDEADBEEFu, 0xDEADBEEFu, 0xDEADBEEFu};
  do_ldmatrix<NUM, TRANS>(base + (uint32_t)addr[t * 32 + lane], r);
  for (int j = 0; j < NUM; ++j) regs[((size_t)t * 32 + lane) * NUM + j] = r[j];
}

// regs: (T, 32, NUM) uint32 in; addr: (T, 32); smem_out: (T, nelem) uint16 out, the shared
// buffer being filled with `fill` before the store.
template <int NUM, bool TRANS>
__global__ void k_stmatrix(int nelem, uint16_t fill, const uint32_t* __restrict__ regs,
                           const int* __restrict__ addr, uint16_t* __restrict__ smem_out) {
  extern __shared__ __align__(128) uint16_t sm[];
  const int t = blockIdx.x, lane = threadIdx.x;
  for (int i = lane; i < nelem; i += 32) sm[i] = fill;
  uint32_t r[4];
  for (int j = 0; j < NUM; ++j) r[j] = regs[((size_t)t * 32 + lane) * NUM + j];
  __syncthreads();
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
  do_stmatrix<NUM, TRANS>(base + (uint32_t)addr[t * 32 + lane], r);
  __syncthreads();
  for (int i = lane; i < nelem; i += 32) smem_out[(size_t)t * nelem + i] = sm[i];
}

// regs_in, regs_out: (T, 32) uint32.
__global__ void k_movmatrix(const uint32_t* __restrict__ in, uint32_t* __restrict__ out) {
  const int t = blockIdx.x, lane = threadIdx.x;
  uint32_t a = in[t * 32 + lane], d = 0xDEADBEEFu;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
  out[t * 32 + lane] = d;
}

template <int NUM, bool TRANS>
static int run_ld(int T, int nelem, const uint16_t* smem, const int* addr, uint32_t* regs) {
  Dev ds, da, dr;
  const size_t sb = sizeof(uint16_t) * (size_t)T * nelem;
  if (ds.up(smem, sb) || da.up(addr, sizeof(int) * 32 * (size_t)T) ||
      dr.alloc(sizeof(uint32_t) * 32 * NUM * (size_t)T))
    return -1;
  const size_t shm = sizeof(uint16_t) * (size_t)nelem;
  if (shm > 48 * 1024)
    CK(cudaFuncSetAttribute(k_ldmatrix<NUM, TRANS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
  if (T) k_ldmatrix<NUM, TRANS><<<T, 32, shm>>>(nelem, ds.as<uint16_t>(), da.as<int>(), dr.as<uint32_t>());
  if (finish()) return -1;
  return dr.down(regs, sizeof(uint32_t) * 32 * NUM * (size_t)T);
}

template <int NUM, bool TRANS>
static int run_st(int T, int nelem, int fill, const uint32_t* regs, const int* addr, uint16_t* smem_out) {
  Dev dr, da, ds;
  const size_t sb = sizeof(uint16_t) * (size_t)T * nelem;
  if (dr.up(regs, sizeof(uint32_t) * 32 * NUM * (size_t)T) || da.up(addr, sizeof(int) * 32 * (size_t)T) ||
      ds.alloc(sb))
    return -1;
  const size_t shm = sizeof(uint16_t) * (size_t)nelem;
  if (shm > 48 * 1024)
    CK(cudaFuncSetAttribute(k_stmatrix<NUM, TRANS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
  if (T)
    k_stmatrix<NUM, TRANS><<<T, 32, shm>>>(nelem, (uint16_t)fill, dr.as<uint32_t>(), da.as<int>(),
                                            ds.as<uint16_t>());
  if (finish()) return -1;
  return ds.down(smem_out, sb);
}

static int bad_variant(const char* what, int num, int trans) {
  snprintf(g_err, sizeof g_err, "%s: num must be 1, 2 or 4 and trans 0 or 1; got num=%d trans=%d",
           what, num, trans);
  return -1;
}

EXPORT int mc_ldmatrix(int num, int trans, int T, int nelem, const uint16_t* smem, const int* addr,
                       uint32_t* regs) {
  switch (num * 2 + (trans != 0)) {
    case 2: return run_ld<1, false>(T, nelem, smem, addr, regs);
    case 3: return run_ld<1, true>(T, nelem, smem, addr, regs);
    case 4: return run_ld<2, false>(T, nelem, smem, addr, regs);
    case 5: return run_ld<2, true>(T, nelem, smem, addr, regs);
    case 8: return run_ld<4, false>(T, nelem, smem, addr, regs);
    case 9: return run_ld<4, true>(T, nelem, smem, addr, regs);
  }
  return bad_variant("mc_ldmatrix", num, trans);
}

EXPORT int mc_stmatrix(int num, int trans, int T, int nelem, int fill, const uint32_t* regs,
                       const int* addr, uint16_t* smem_out) {
  switch (num * 2 + (trans != 0)) {
    case 2: return run_st<1, false>(T, nelem, fill, regs, addr, smem_out);
    case 3: return run_st<1, true>(T, nelem, fill, regs, addr, smem_out);
    case 4: return run_st<2, false>(T, nelem, fill, regs, addr, smem_out);
    case 5: return run_st<2, true>(T, nelem, fill, regs, addr, smem_out);
    case 8: return run_st<4, false>(T, nelem, fill, regs, addr, smem_out);
    case 9: return run_st<4, true>(T, nelem, fill, regs, addr, smem_out);
  }
  return bad_variant("mc_stmatrix", num, trans);
}

EXPORT int mc_movmatrix(int T, const uint32_t* in, uint32_t* out) {
  Dev di, dout;
  if (di.up(in, sizeof(uint32_t) * 32 * (size_t)T) || dout.alloc(sizeof(uint32_t) * 32 * (size_t)T))
    return -1;
  if (T) k_movmatrix<<<T, 32>>>(di.as<uint32_t>(), dout.as<uint32_t>());
  if (finish()) return -1;
  return dout.down(out, sizeof(uint32_t) * 32 * (size_t)T);
}
#endif  // MC_PART_LDM
