// sluice_attention: multi-head self-attention prefill, batch 1, f32.
//
//   qkv [T, 3·H·D]: token t's row holds q (heads 0..H), then k, then v, each
//                   head's D values contiguous.
//   out [T, H·D]:   out[t, h·D + d] = Σ_j softmax_j(q_t·k_j / √D) · v_j[d]
//                   over keys j < T, or j ≤ t when `causal` != 0.
//   D ≤ 128.
//
// One thread per query row (64 rows per block), one block column per head.
// The block stages its 64 queries (pre-scaled by 1/√D, transposed, padded to
// a conflict-free stride) in shared memory, then walks the keys in tiles of
// ATT_TK rows of K and V staged in shared memory; every thread reads the same
// K/V element at once (a broadcast). Per tile each thread computes ATT_TK
// scores and updates its running max m, denominator l and accumulator
// acc[D] with the online-softmax rescaling (one rescale per tile). The head
// size picks an instantiation with D padded to 32, 64 or 128, so the
// accumulator stays in registers and the loops are fully unrolled.
// Static shared memory: 128·65 + 2·8·128 floats ≈ 40.5 KiB.
//
// Preemption: the prologue, then a poll every SLUICE_POLL_EVERY key tiles,
// folded into the tile barriers like gemm.cu (an addition to the ABI's list
// of polling kernels: long prompts make this kernel long).
//
// Launch: block 64, grid (ceil(T/64), H), no dynamic shared memory.

#include "sluice.cuh"

#define ATT_Q 64     // query rows (threads) per block
#define ATT_DMAX 128 // largest head size
#define ATT_TK 8     // keys per shared-memory tile
#define ATT_QSTRIDE (ATT_Q + 1)

template <int DM>
__device__ __forceinline__ void sluice_attention_rows(
    const SluiceCtl* __restrict__ ctl, const float* __restrict__ qkv,
    float* __restrict__ out, int T, int H, int D, int causal,
    float (*Qs)[ATT_QSTRIDE], float (*Ks)[ATT_DMAX], float (*Vs)[ATT_DMAX],
    unsigned int* s_stop)
{
    const int tid = threadIdx.x;
    const int h = blockIdx.y;
    const int q0 = blockIdx.x * ATT_Q;
    const int t = q0 + tid;
    const long long row_stride = 3ll * H * D;
    const int q_off = h * D;
    const int k_off = H * D + h * D;
    const int v_off = 2 * H * D + h * D;
    const float scale = rsqrtf((float)D);

    // Stage the block's queries: consecutive threads read consecutive d of
    // one row (coalesced); the stride ATT_Q + 1 keeps the transposed stores
    // and the per-thread column reads free of bank conflicts.
    for (int idx = tid; idx < ATT_Q * DM; idx += ATT_Q) {
        const int qi = idx / DM;
        const int d = idx - qi * DM;
        const int tq = q0 + qi;
        Qs[d][qi] = (tq < T && d < D) ? qkv[tq * row_stride + q_off + d] * scale : 0.0f;
    }

    float acc[DM];
#pragma unroll
    for (int d = 0; d < DM; ++d)
        acc[d] = 0.0f;
    float m = sluice_neg_inf();
    float l = 0.0f;

    // Keys past the block's last query are all masked when causal.
    const int kv_end = causal ? min(T, q0 + ATT_Q) : T;
    bool polled = false;
    for (int j0 = 0, tile = 0; j0 < kv_end; j0 += ATT_TK, ++tile) {
        // Everyone is done with the previous tile (and Qs is staged), and
        // the previous poll's s_stop is visible.
        __syncthreads();
        if (polled && *s_stop != 0u)
            return;
        for (int idx = tid; idx < ATT_TK * DM; idx += ATT_Q) {
            const int j = idx / DM;
            const int d = idx - j * DM;
            const int tk = j0 + j;
            const bool ok = tk < T && d < D;
            const float* r = qkv + (ok ? tk * row_stride : 0ll);
            Ks[j][d] = ok ? r[k_off + d] : 0.0f;
            Vs[j][d] = ok ? r[v_off + d] : 0.0f;
        }
        __syncthreads();

        // Poll every SLUICE_POLL_EVERY tiles: thread 0 loads the flag now,
        // publishes it after the arithmetic, everyone tests it after the next
        // barrier. s_stop is next written SLUICE_POLL_EVERY tiles later,
        // after every thread has passed that barrier and tested it.
        polled = (tile % SLUICE_POLL_EVERY == SLUICE_POLL_EVERY - 1) && (j0 + ATT_TK < kv_end);
        unsigned int flag = 0u;
        if (polled && tid == 0)
            flag = sluice_read_flag(ctl);

        if (t < T) {
            float s[ATT_TK];
#pragma unroll
            for (int j = 0; j < ATT_TK; ++j)
                s[j] = 0.0f;
#pragma unroll
            for (int d = 0; d < DM; ++d) {
                const float qd = Qs[d][tid];
#pragma unroll
                for (int j = 0; j < ATT_TK; ++j)
                    s[j] = fmaf(qd, Ks[j][d], s[j]);
            }
            float tmax = sluice_neg_inf();
#pragma unroll
            for (int j = 0; j < ATT_TK; ++j) {
                const int tk = j0 + j;
                const bool valid = tk < T && (causal == 0 || tk <= t);
                s[j] = valid ? s[j] : sluice_neg_inf();
                tmax = fmaxf(tmax, s[j]);
            }
            // A tile wholly masked for this row changes nothing (and would
            // give exp(−inf − −inf) = NaN below).
            if (tmax != sluice_neg_inf()) {
                const float m_new = fmaxf(m, tmax);
                const float corr = expf(m - m_new); // 0 on the first live tile
                float p[ATT_TK];
                float psum = 0.0f;
#pragma unroll
                for (int j = 0; j < ATT_TK; ++j) {
                    p[j] = expf(s[j] - m_new); // masked: exp(−inf) = 0
                    psum += p[j];
                }
                l = fmaf(l, corr, psum);
#pragma unroll
                for (int d = 0; d < DM; ++d) {
                    float a = acc[d] * corr;
#pragma unroll
                    for (int j = 0; j < ATT_TK; ++j)
                        a = fmaf(p[j], Vs[j][d], a);
                    acc[d] = a;
                }
                m = m_new;
            }
        }

        if (polled && tid == 0)
            *s_stop = flag;
    }

    if (t < T && l > 0.0f) {
        const float inv = 1.0f / l;
        float* o = out + (long long)t * H * D + h * D;
#pragma unroll
        for (int d = 0; d < DM; ++d)
            if (d < D)
                o[d] = acc[d] * inv;
    }
}

extern "C" __global__ void __launch_bounds__(ATT_Q)
sluice_attention(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                 const float* __restrict__ qkv, float* __restrict__ out,
                 int T, int H, int D, int causal)
{
    SLUICE_PROLOGUE(ctl, kidx);

    // Declared once here (not in the template) so the three instantiations
    // share one allocation.
    __shared__ float Qs[ATT_DMAX][ATT_QSTRIDE];
    __shared__ float Ks[ATT_TK][ATT_DMAX];
    __shared__ float Vs[ATT_TK][ATT_DMAX];
    __shared__ unsigned int s_stop;

    // The launch helper refuses D outside 1..=128; a raw launch with one
    // writes nothing rather than reading out of bounds.
    if (D <= 0 || D > ATT_DMAX)
        return;
    if (D <= 32)
        sluice_attention_rows<32>(ctl, qkv, out, T, H, D, causal, Qs, Ks, Vs, &s_stop);
    else if (D <= 64)
        sluice_attention_rows<64>(ctl, qkv, out, T, H, D, causal, Qs, Ks, Vs, &s_stop);
    else
        sluice_attention_rows<128>(ctl, qkv, out, T, H, D, causal, Qs, Ks, Vs, &s_stop);
}
