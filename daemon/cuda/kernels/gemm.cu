// sluice_gemm: C[M,N] = act(A[M,K] · B[K,N] + bias[N]), all row-major f32.
//
// Launch: block 256 threads (1-D), grid (ceil(N/64), ceil(M/64)), no dynamic
// shared memory. Each block computes one 64×64 tile of C, walking K in tiles
// of 16 staged in shared memory (2·64·16 floats = 8 KiB); thread (tx, ty) =
// (tid % 16, tid / 16) owns the 4×4 outputs at rows ty + 16i, columns
// tx + 16j of the tile, so a warp's reads of the B tile and its stores of C
// touch 16 consecutive columns. Every load and store is bounds-checked: any
// M, N, K ≥ 1 works (K = 0 gives act(bias)).
//
// Preemption: the prologue, then a poll every SLUICE_POLL_EVERY K-tiles. The
// poll's flag load is issued before the tile's arithmetic and published in
// shared memory just before the tile's closing barrier, so its latency
// (a global-memory read of the control block) overlaps the FMAs and the
// exit is block-uniform.

#include "sluice.cuh"

#define GEMM_BM 64
#define GEMM_BN 64
#define GEMM_BK 16
#define GEMM_THREADS 256

extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
sluice_gemm(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
            const float* __restrict__ A, const float* __restrict__ B,
            const float* __restrict__ bias, float* __restrict__ C,
            int M, int N, int K, int act)
{
    SLUICE_PROLOGUE(ctl, kidx);

    __shared__ float As[GEMM_BK][GEMM_BM]; // As[k][m]: the A tile, transposed
    __shared__ float Bs[GEMM_BK][GEMM_BN]; // Bs[k][n]
    __shared__ unsigned int s_stop;

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int m0 = blockIdx.y * GEMM_BM;
    const int n0 = blockIdx.x * GEMM_BN;

    // A loader: thread reads 4 consecutive k of row m0 + a_m. A warp covers
    // 32 rows, so its shared-memory stores (one column of As) hit 32 banks.
    const int a_m = tid & 63;
    const int a_k = (tid >> 6) * 4;
    const bool a_ok = m0 + a_m < M;
    const float* a_row = A + (a_ok ? (long long)(m0 + a_m) * K : 0ll);
    // B loader: thread reads column n0 + b_n at k rows b_k + 4r; a warp reads
    // 32 consecutive floats of one row of B (coalesced).
    const int b_n = tid & 63;
    const int b_k = tid >> 6;
    const bool b_ok = n0 + b_n < N;
    const float* b_col = B + (b_ok ? n0 + b_n : 0);

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            acc[i][j] = 0.0f;

    const int ntiles = (K + GEMM_BK - 1) / GEMM_BK;
    for (int kt = 0; kt < ntiles; ++kt) {
        const int k0 = kt * GEMM_BK;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int k = k0 + a_k + j;
            As[a_k + j][a_m] = (a_ok && k < K) ? a_row[k] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int kk = b_k + 4 * r;
            const int k = k0 + kk;
            Bs[kk][b_n] = (b_ok && k < K) ? b_col[(long long)k * N] : 0.0f;
        }
        __syncthreads();

        // Poll after every SLUICE_POLL_EVERY tiles (not after the last one).
        const bool poll = ((kt + 1) % SLUICE_POLL_EVERY == 0) && (kt + 1 < ntiles);
        unsigned int flag = 0u;
        if (poll && tid == 0)
            flag = sluice_read_flag(ctl);

        sluice_tile_mma(As, Bs, acc, ty, tx);

        if (poll && tid == 0)
            s_stop = flag;
        // Closes the tile (the next loads overwrite As/Bs) and publishes
        // s_stop. s_stop is next written at least one barrier later, after
        // every thread has tested it.
        __syncthreads();
        if (poll && s_stop != 0u)
            return;
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = m0 + ty + 16 * i;
        if (row >= M)
            continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + tx + 16 * j;
            if (col < N) {
                float v = acc[i][j];
                if (bias != nullptr)
                    v += bias[col];
                C[(long long)row * N + col] = sluice_act(v, act);
            }
        }
    }
}
