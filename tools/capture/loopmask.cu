// Divergent loops with per-lane trip counts: which lanes read __activemask() together.
// Built once per (unroll pragma, optimisation flags) by probe_loopmask.py, with
// -DUNROLL='_Pragma("unroll 4")' (or nothing). One warp per trial; trips[t][lane] is the
// lane's trip count.
//   program 0 last_trip:  for (i = 0; i < n; ++i) { w = mix(w + i); if (i == n - 1) m = __activemask(); }
//   program 1 every_trip: for (i = 0; i < n; ++i) { w = mix(w + i); rec[min(i, 31)] = __activemask(); }
//   program 2 countdown:  while (n > 0) { w = mix(w + n); --n; if (n == 0) m = __activemask(); }
//   program 3 last_trip_ballot: as 0, with m = __ballot_sync(__activemask(), 1) read on the last trip
// out: program 0, 2, 3: (T, 32, 2) = m, w; program 1: (T, 32, 33) = rec[0..31], w.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#ifndef UNROLL
#define UNROLL
#endif

__device__ __forceinline__ unsigned mix(unsigned w) {
  w ^= w >> 16;
  w *= 0x7feb352du;
  w ^= w >> 15;
  return w;
}

__global__ void last_trip(const int* trips, unsigned* out) {
  int g = blockIdx.x * 32 + threadIdx.x;
  int n = trips[g];
  unsigned m = 0, w = threadIdx.x;
  UNROLL
  for (int i = 0; i < n; ++i) {
    w = mix(w + i);
    if (i == n - 1) m = __activemask();
  }
  out[g * 2] = m;
  out[g * 2 + 1] = w;
}

__global__ void every_trip(const int* trips, unsigned* out) {
  int g = blockIdx.x * 32 + threadIdx.x;
  int n = trips[g];
  unsigned w = threadIdx.x;
  unsigned* rec = out + g * 33;
  UNROLL
  for (int i = 0; i < n; ++i) {
    w = mix(w + i);
    rec[i < 31 ? i : 31] = __activemask();
  }
  rec[32] = w;
}

__global__ void countdown(const int* trips, unsigned* out) {
  int g = blockIdx.x * 32 + threadIdx.x;
  int n = trips[g];
  unsigned m = 0, w = threadIdx.x;
  UNROLL
  while (n > 0) {
    w = mix(w + n);
    --n;
    if (n == 0) m = __activemask();
  }
  out[g * 2] = m;
  out[g * 2 + 1] = w;
}

__global__ void last_trip_ballot(const int* trips, unsigned* out) {
  int g = blockIdx.x * 32 + threadIdx.x;
  int n = trips[g];
  unsigned m = 0, w = threadIdx.x;
  UNROLL
  for (int i = 0; i < n; ++i) {
    w = mix(w + i);
    if (i == n - 1) m = __ballot_sync(__activemask(), 1);
  }
  out[g * 2] = m;
  out[g * 2 + 1] = w;
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); return 2; } } while (0)

int main(int argc, char** argv) {
  if (argc != 5) { fprintf(stderr, "usage: loopmask PROGRAM T TRIPS.bin OUT.bin\n"); return 1; }
  int prog = atoi(argv[1]), T = atoi(argv[2]);
  std::vector<int> trips(T * 32);
  FILE* f = fopen(argv[3], "rb");
  if (!f || fread(trips.data(), 4, trips.size(), f) != trips.size()) return 3;
  fclose(f);
  int words = prog == 1 ? 33 : 2;
  std::vector<unsigned> out(T * 32 * words, 0xDEADBEEFu);
  int* dt; unsigned* dout;
  CK(cudaMalloc(&dt, trips.size() * 4));
  CK(cudaMalloc(&dout, out.size() * 4));
  CK(cudaMemcpy(dt, trips.data(), trips.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dout, out.data(), out.size() * 4, cudaMemcpyHostToDevice));
  if (prog == 0) last_trip<<<T, 32>>>(dt, dout);
  else if (prog == 1) every_trip<<<T, 32>>>(dt, dout);
  else if (prog == 2) countdown<<<T, 32>>>(dt, dout);
  else last_trip_ballot<<<T, 32>>>(dt, dout);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
  f = fopen(argv[4], "wb");
  fwrite(out.data(), 4, out.size(), f);
  fclose(f);
  return 0;
}
