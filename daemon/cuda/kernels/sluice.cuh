// sluice.cuh: the prologue every sluice kernel runs first, the preemption
// poll for long main loops, and the block reductions the kernels share.
//
// Compiled by NVRTC with no system or CUDA headers: only NVRTC built-ins
// (__syncthreads, atomicMax, __shfl_xor_sync, expf, ...) are used here.
// Contract and launch configurations: docs/cuda-kernels.md.
//
// Protocol (REEF §4.2 lazy eviction, §4.4 execution index):
// - `SluiceCtl` lives in device memory, one per queue (stream); the host
//   writes and reads it with small copies on a stream of its own. The host sets `preempt` to 1 to evict every kernel of the queue that is
//   still buffered in the device queue or running, and clears it before it
//   restores the queue.
// - The prologue: thread 0 of each block reads `preempt` once and shares it
//   with the block; if it is set, the whole block returns before doing any
//   work. Otherwise block (0,0,0) records `started = max(started, kidx + 1)`.
// - Long main loops poll again every SLUICE_POLL_EVERY iterations and leave
//   early (cooperative kill). Every exit is block-uniform: one thread reads
//   the flag into shared memory, a __syncthreads publishes it, then every
//   thread tests the same value, so no thread waits at a barrier another
//   thread has skipped.
// - Leaving early is correct because every kernel is idempotent: it never
//   reads a buffer it writes, so relaunching it recomputes every output.
//
// `ctl` may be null (a standalone launch, e.g. a correctness test): no flag
// is read and no index is recorded.

#pragma once

#define SLUICE_POLL_EVERY 8
#define SLUICE_ACT_NONE 0
#define SLUICE_ACT_RELU 1
#define SLUICE_ACT_GELU 2

struct SluiceCtl {
    volatile unsigned int preempt;
    unsigned int _pad;
    unsigned long long started;
};

// One thread's read of the preemption flag: a volatile load, so it is never
// cached in a register or served by the read-only cache; each call reaches
// the control block's word in memory (L2), where the host's copies land.
__device__ __forceinline__ unsigned int sluice_read_flag(const SluiceCtl* ctl)
{
    return ctl != nullptr ? ctl->preempt : 0u;
}

__device__ __forceinline__ unsigned int sluice_thread_rank()
{
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// The prologue. Called by every thread of the block, first thing, in uniform
// control flow. Returns true (in every thread) when the block must return.
__device__ __forceinline__ bool sluice_prologue(const SluiceCtl* ctl, unsigned int kidx)
{
    __shared__ unsigned int s_sluice_preempt;
    if (sluice_thread_rank() == 0) {
        unsigned int f = sluice_read_flag(ctl);
        s_sluice_preempt = f;
        if (f == 0u && ctl != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
            // The kernel execution index (REEF §4.4). `started` is written
            // only by the device (this atomic); the host only reads it. The
            // ABI passes `ctl` as const because the kernel never writes the
            // flag; this one field is the exception.
            atomicMax(const_cast<unsigned long long*>(&ctl->started),
                      (unsigned long long)kidx + 1ull);
        }
    }
    __syncthreads();
    return s_sluice_preempt != 0u;
}

#define SLUICE_PROLOGUE(ctl, kidx)          \
    do {                                    \
        if (sluice_prologue((ctl), (kidx))) \
            return;                         \
    } while (0)

// Block-uniform poll for main loops that have no barrier of their own to
// share: every thread of the block calls it in uniform control flow; all get
// the same answer. Costs two barriers; kernels with a tiled main loop fold
// the poll into their existing barriers instead (see gemm.cu).
__device__ __forceinline__ bool sluice_should_stop(const SluiceCtl* ctl)
{
    __shared__ unsigned int s_sluice_stop;
    __syncthreads(); // every thread has read the previous poll's value
    if (sluice_thread_rank() == 0)
        s_sluice_stop = sluice_read_flag(ctl);
    __syncthreads();
    return s_sluice_stop != 0u;
}

// ---- numerics shared by the kernels -------------------------------------

__device__ __forceinline__ float sluice_neg_inf()
{
    return __int_as_float(0xff800000);
}

// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
__device__ __forceinline__ float sluice_gelu(float x)
{
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float sluice_nan()
{
    return __int_as_float(0x7fc00000);
}

// The fused activation of gemm/conv2d. An unknown code yields NaN, so a
// builder bug shows in the output instead of passing for "no activation"
// (a trap would poison the whole context the daemon shares).
__device__ __forceinline__ float sluice_act(float x, int act)
{
    if (act == SLUICE_ACT_NONE)
        return x;
    if (act == SLUICE_ACT_RELU)
        return fmaxf(x, 0.0f);
    if (act == SLUICE_ACT_GELU)
        return sluice_gelu(x);
    return sluice_nan();
}

__device__ __forceinline__ float sluice_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sluice_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum / max over a 1-D block whose size is a multiple of 32 (at
// most 1024). Every thread calls it in uniform control flow and gets the
// result. `scratch` is a __shared__ float[32] owned by the caller; it may be
// reused by the next call (the leading barrier protects it).
__device__ __forceinline__ float sluice_block_sum(float v, float* scratch)
{
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
    const unsigned int nwarps = blockDim.x >> 5;
    v = sluice_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return sluice_warp_sum(v);
}

__device__ __forceinline__ float sluice_block_max(float v, float* scratch)
{
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
    const unsigned int nwarps = blockDim.x >> 5;
    v = sluice_warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : sluice_neg_inf();
    return sluice_warp_max(v);
}

/* One K-tile of the 64x64 GEMM tiling shared by sluice_gemm and
 * sluice_conv2d: each of the 16x16 threads accumulates its 4x4 outputs
 * (rows ty + 16 i, columns tx + 16 j) over the BK rows of the shared
 * tiles As[k][m] and Bs[k][n]. */
template <int BK>
__device__ __forceinline__ void sluice_tile_mma(const float (&As)[BK][64], const float (&Bs)[BK][64],
                                                float (&acc)[4][4], int ty, int tx)
{
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            a[i] = As[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

