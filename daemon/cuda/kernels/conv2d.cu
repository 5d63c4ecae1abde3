// sluice_conv2d: y[Cout,OH,OW] = act(conv(x[Cin,H,W], w[Cout,Cin,KH,KW]) + bias[Cout]),
// batch 1, NCHW f32, symmetric zero padding, square stride.
//
// Implicit GEMM: M = Cout, N = OH·OW, K = Cin·KH·KW with
// OH = (H + 2·pad − KH) / stride + 1 (likewise OW). The weight tensor is
// already the row-major A[M,K]; the B[K,N] tile is gathered from x on the fly
// (column n = (oh, ow), row k = (ci, kh, kw), zero outside the image), and
// y is exactly the row-major C[M,N]. Same tiling as sluice_gemm: 64×64 output
// tile per block of 256 threads, K-tiles of 16 in 8 KiB of shared memory,
// 4×4 outputs per thread, a poll every SLUICE_POLL_EVERY K-tiles.
//
// Launch: block 256, grid (ceil(OH·OW/64), ceil(Cout/64)), no dynamic shared
// memory.

#include "sluice.cuh"

#define CONV_BM 64
#define CONV_BN 64
#define CONV_BK 16
#define CONV_THREADS 256

extern "C" __global__ void __launch_bounds__(CONV_THREADS)
sluice_conv2d(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
              const float* __restrict__ x, const float* __restrict__ w,
              const float* __restrict__ bias, float* __restrict__ y,
              int Cin, int H, int W, int Cout, int KH, int KW,
              int stride, int pad, int act)
{
    SLUICE_PROLOGUE(ctl, kidx);

    __shared__ float As[CONV_BK][CONV_BM]; // As[k][co]: weights, transposed
    __shared__ float Bs[CONV_BK][CONV_BN]; // Bs[k][n]: gathered input
    __shared__ unsigned int s_stop;

    const int OH = (H + 2 * pad - KH) / stride + 1;
    const int OW = (W + 2 * pad - KW) / stride + 1;
    const int M = Cout;
    const int N = OH * OW;
    const int KHW = KH * KW;
    const int K = Cin * KHW;

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int m0 = blockIdx.y * CONV_BM;
    const int n0 = blockIdx.x * CONV_BN;

    // A loader (weights), as in sluice_gemm.
    const int a_m = tid & 63;
    const int a_k = (tid >> 6) * 4;
    const bool a_ok = m0 + a_m < M;
    const float* a_row = w + (a_ok ? (long long)(m0 + a_m) * K : 0ll);

    // B loader: this thread's output pixel is fixed for the whole K loop.
    const int b_n = tid & 63;
    const int b_k = tid >> 6;
    const int n = n0 + b_n;
    const bool b_ok = n < N;
    const int oh = b_ok ? n / OW : 0;
    const int ow = b_ok ? n - oh * OW : 0;
    const int ih0 = oh * stride - pad;
    const int iw0 = ow * stride - pad;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            acc[i][j] = 0.0f;

    const int ntiles = (K + CONV_BK - 1) / CONV_BK;
    for (int kt = 0; kt < ntiles; ++kt) {
        const int k0 = kt * CONV_BK;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int k = k0 + a_k + j;
            As[a_k + j][a_m] = (a_ok && k < K) ? a_row[k] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int kk = b_k + 4 * r;
            const int k = k0 + kk;
            float v = 0.0f;
            if (b_ok && k < K) {
                const int ci = k / KHW;
                const int rem = k - ci * KHW;
                const int kh = rem / KW;
                const int kw = rem - kh * KW;
                const int ih = ih0 + kh;
                const int iw = iw0 + kw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    v = x[((long long)ci * H + ih) * W + iw];
            }
            Bs[kk][b_n] = v;
        }
        __syncthreads();

        const bool poll = ((kt + 1) % SLUICE_POLL_EVERY == 0) && (kt + 1 < ntiles);
        unsigned int flag = 0u;
        if (poll && tid == 0)
            flag = sluice_read_flag(ctl);

        sluice_tile_mma(As, Bs, acc, ty, tx);

        if (poll && tid == 0)
            s_stop = flag;
        __syncthreads(); // closes the tile, publishes s_stop (see gemm.cu)
        if (poll && s_stop != 0u)
            return;
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int co = m0 + ty + 16 * i;
        if (co >= M)
            continue;
        const float b = bias != nullptr ? bias[co] : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + tx + 16 * j;
            if (col < N)
                y[(long long)co * N + col] = sluice_act(acc[i][j] + b, act);
        }
    }
}
