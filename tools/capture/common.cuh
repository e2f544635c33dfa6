// common.cuh: what every capture library shares (ptxmma.cu, sp.cu, movcvt.cu, warpcap.cu,
// cg.cu, wgmma.cu): the exported-symbol macro, the last CUDA error as text, the error check, a device
// buffer that frees itself, the launch check and the GPU query.
//
// A library includes it and names its entry points' prefix once:
//
//   #include "common.cuh"
//   CAPTURE_LAST_ERROR(sp)  // EXPORT const char* sp_last_error()
//   CAPTURE_DEVICE(sp)      // EXPORT int sp_device(name, len, &major, &minor, &runtime, &driver)
//
// Every entry point returns 0 on success and -1 on a CUDA error, whose message
// (file:line call: error) the library's *_last_error() returns. No value is interpreted
// here: buffers hold raw bits.

#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#define EXPORT extern "C" __attribute__((visibility("default")))

static char g_err[512] = "";

#define CK(call)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      snprintf(g_err, sizeof g_err, "%s:%d %s: %s", __FILE__, __LINE__, #call,           \
               cudaGetErrorString(e_));                                                  \
      return -1;                                                                         \
    }                                                                                    \
  } while (0)

// A device buffer that frees itself. alloc leaves the bytes as cudaMalloc gives them;
// zeros clears them; up allocates and copies from the host; down copies back.
struct Dev {
  void* p = nullptr;
  size_t n = 0;
  ~Dev() {
    if (p) cudaFree(p);
  }
  int alloc(size_t bytes) {
    n = bytes ? bytes : 1;
    CK(cudaMalloc(&p, n));
    return 0;
  }
  int zeros(size_t bytes) {
    if (alloc(bytes)) return -1;
    CK(cudaMemset(p, 0, n));
    return 0;
  }
  int up(const void* h, size_t bytes) {
    if (alloc(bytes)) return -1;
    if (bytes) CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return 0;
  }
  int down(void* h, size_t bytes) {
    if (bytes) CK(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost));
    return 0;
  }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// After a launch: the launch error, then the kernel's.
static inline int finish() {
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}

// Device 0's name, compute capability, runtime and driver versions.
static inline int capture_device(char* name, int len, int* major, int* minor, int* runtime,
                                 int* driver) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  snprintf(name, len, "%s", p.name);
  *major = p.major;
  *minor = p.minor;
  CK(cudaRuntimeGetVersion(runtime));
  CK(cudaDriverGetVersion(driver));
  return 0;
}

#define CAPTURE_LAST_ERROR(prefix) \
  EXPORT const char* prefix##_last_error() { return g_err; }

#define CAPTURE_DEVICE(prefix)                                                                \
  EXPORT int prefix##_device(char* name, int len, int* major, int* minor, int* runtime,      \
                             int* driver) {                                                   \
    return capture_device(name, len, major, minor, runtime, driver);                          \
  }
