// The general kernels an imported ONNX graph lowers to, besides the tiled
// ones: any batch N >= 1, NCHW, f32. Integer tables read from device memory
// (broadcast strides, source indices, token ids) are f32 whole numbers,
// exact up to 2^24; the lowering refuses anything larger.
//
// Every kernel: block 256, grid min(ceil(total/256), 65535) and a
// grid-stride loop over the `total` output elements; no dynamic shared
// memory. sluice_conv2d_ex and sluice_bmm poll the preemption flag every
// SLUICE_POLL_EVERY iterations of their reduction loop, which has the same
// trip count in every thread (threads past the end compute a clamped
// element and do not store it), so the poll stays block-uniform. Each
// kernel writes every element of its output and reads none of it.
//
// sluice_elementwise: y[i] = act(op(a[ia], b[ib], c[ic])) with the
//   operands' element offsets from `desc` (6 output dims, then 6 strides
//   for each of a, b, c; 0 along broadcast axes). op 0..19 unary on a
//   (0 identity, 1 relu, 2 leaky relu(p0), 3 sigmoid, 4 tanh, 5 hard
//   sigmoid(p0, p1), 6 hard swish, 7 silu, 8 erf, 9 gelu (erf), 10 gelu
//   (tanh), 11 sqrt, 12 neg, 13 exp, 14 log, 15 abs, 16 reciprocal,
//   17 floor, 18 ceil, 19 clip(p0, p1)); 32..38 binary (add, sub, mul, div,
//   pow, max, min); 48 where (c != 0 ? a : b). act: a unary code applied
//   after op (0: none). Unknown codes write NaN.
// sluice_gather: y[i] = idx[i] < 0 ? fill : element idx[i] of x0..x3 laid
//   end to end (n0..n3 elements; absent sources are null with length 0).
// sluice_bmm: y[t] = a[t]·b[t], t < batch, M×K by K×N, a[t] at t·sa, b[t]
//   at t·sb, y[t] at t·M·N.
// sluice_embedding: y[t, :] = table[ids[t], :] (a negative id counts from
//   the end; one outside -vocab..vocab writes NaN).
// sluice_conv2d_ex: direct grouped convolution, per-axis stride, dilation
//   and leading padding, then bias and act (0 none, 1 relu, 2 gelu).
// sluice_pool2d_ex: mode 0 max, 1 mean of the in-image elements, 2 mean
//   counting the declared padding (peh, pew: trailing pads).
// sluice_lrn: y = x / (bias + alpha/size · Σ x²)^beta over the channel
//   window c - (size-1)/2 ..= c + ceil((size-1)/2).
// sluice_interp: y[i] = Σ_t w[i·taps + t] · x[idx[i·taps + t]] (linear
//   Resize: the corners of each output's interpolation cell); taps of
//   weight 0 are skipped, an index outside x (src elements) writes NaN.

#include "sluice.cuh"

#define GEN_RANK 6

__device__ __forceinline__ float gen_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

__device__ float gen_unary(int op, float x, float p0, float p1)
{
    switch (op) {
    case 0: return x;
    case 1: return fmaxf(x, 0.0f);
    case 2: return x >= 0.0f ? x : p0 * x;
    case 3: return gen_sigmoid(x);
    case 4: return tanhf(x);
    case 5: return fminf(fmaxf(p0 * x + p1, 0.0f), 1.0f);
    case 6: return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    case 7: return x * gen_sigmoid(x);
    case 8: return erff(x);
    case 9: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case 10: return sluice_gelu(x);
    case 11: return sqrtf(x);
    case 12: return -x;
    case 13: return expf(x);
    case 14: return logf(x);
    case 15: return fabsf(x);
    case 16: return 1.0f / x;
    case 17: return floorf(x);
    case 18: return ceilf(x);
    case 19: return fminf(fmaxf(x, p0), p1);
    default: return sluice_nan();
    }
}

__device__ float gen_binary(int op, float a, float b)
{
    switch (op) {
    case 32: return a + b;
    case 33: return a - b;
    case 34: return a * b;
    case 35: return a / b;
    case 36: return powf(a, b);
    case 37: return fmaxf(a, b);
    case 38: return fminf(a, b);
    default: return sluice_nan();
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_elementwise(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                   const float* __restrict__ a, const float* __restrict__ b,
                   const float* __restrict__ c, const float* __restrict__ desc,
                   float* __restrict__ y, int n, int op, int act, float p0, float p1)
{
    SLUICE_PROLOGUE(ctl, kidx);
    __shared__ long long d[4 * GEN_RANK];
    if (threadIdx.x < 4 * GEN_RANK)
        d[threadIdx.x] = (long long)desc[threadIdx.x];
    __syncthreads();

    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        long long rem = i, ia = 0, ib = 0, ic = 0;
        for (int r = GEN_RANK - 1; r >= 0; --r) {
            const long long q = rem % d[r];
            rem /= d[r];
            ia += q * d[GEN_RANK + r];
            ib += q * d[2 * GEN_RANK + r];
            ic += q * d[3 * GEN_RANK + r];
        }
        float v;
        if (op < 32)
            v = gen_unary(op, a[ia], p0, p1);
        else if (op < 48)
            v = gen_binary(op, a[ia], b[ib]);
        else if (op == 48)
            v = c[ic] != 0.0f ? a[ia] : b[ib];
        else
            v = sluice_nan();
        y[i] = act == 0 ? v : gen_unary(act, v, p0, p1);
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_gather(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
              const float* __restrict__ x0, const float* __restrict__ x1,
              const float* __restrict__ x2, const float* __restrict__ x3,
              const float* __restrict__ idx, float* __restrict__ y,
              int n, int n0, int n1, int n2, int n3, float fill)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float f = idx[i];
        float v;
        if (f < 0.0f) {
            v = fill;
        } else {
            int j = (int)f;
            if (j < n0) {
                v = x0[j];
            } else if ((j -= n0) < n1) {
                v = x1[j];
            } else if ((j -= n1) < n2) {
                v = x2[j];
            } else if ((j -= n2) < n3) {
                v = x3[j];
            } else {
                v = sluice_nan();
            }
        }
        y[i] = v;
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_bmm(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
           const float* __restrict__ a, const float* __restrict__ b,
           float* __restrict__ y, int batch, int M, int N, int K, int sa, int sb)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const long long total = (long long)batch * M * N;
    const long long step = (long long)gridDim.x * blockDim.x;
    // Block-uniform trip count: every thread runs the same iterations.
    for (long long base = (long long)blockIdx.x * blockDim.x; base < total; base += step) {
        const long long i0 = base + threadIdx.x;
        const long long i = i0 < total ? i0 : total - 1;
        const long long t = i / ((long long)M * N);
        const int row = (int)((i / N) % M);
        const int col = (int)(i % N);
        const float* ar = a + t * sa + (long long)row * K;
        const float* bc = b + t * sb + col;
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            if (k % (SLUICE_POLL_EVERY * 32) == 0 && k > 0 && sluice_should_stop(ctl))
                return;
            acc = fmaf(ar[k], bc[(long long)k * N], acc);
        }
        if (i0 < total)
            y[i0] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_embedding(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                 const float* __restrict__ table, const float* __restrict__ ids,
                 float* __restrict__ y, int count, int dim, int vocab)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const long long total = (long long)count * dim;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        float id = ids[i / dim];
        if (id < 0.0f)
            id += (float)vocab;
        y[i] = (id >= 0.0f && id < (float)vocab)
                   ? table[(long long)(int)id * dim + i % dim]
                   : sluice_nan();
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_conv2d_ex(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                 const float* __restrict__ x, const float* __restrict__ w,
                 const float* __restrict__ bias, float* __restrict__ y,
                 int N, int Cin, int H, int W, int Cout, int OH, int OW, int KH, int KW,
                 int sh, int sw, int ph, int pw, int dh, int dw, int groups, int act)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const int cg = Cin / groups;
    const int og = Cout / groups;
    const long long total = (long long)N * Cout * OH * OW;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long base = (long long)blockIdx.x * blockDim.x; base < total; base += step) {
        const long long i0 = base + threadIdx.x;
        const long long i = i0 < total ? i0 : total - 1;
        const int ox = (int)(i % OW);
        const int oy = (int)((i / OW) % OH);
        const int co = (int)((i / ((long long)OW * OH)) % Cout);
        const long long img = i / ((long long)OW * OH * Cout);
        const int g = co / og;
        float acc = 0.0f;
        for (int ci = 0; ci < cg; ++ci) {
            if (ci % SLUICE_POLL_EVERY == 0 && ci > 0 && sluice_should_stop(ctl))
                return;
            const float* xc = x + ((img * Cin) + (long long)g * cg + ci) * H * W;
            const float* wc = w + ((long long)co * cg + ci) * KH * KW;
            for (int ky = 0; ky < KH; ++ky) {
                const int iy = oy * sh + ky * dh - ph;
                if (iy < 0 || iy >= H)
                    continue;
                for (int kx = 0; kx < KW; ++kx) {
                    const int ix = ox * sw + kx * dw - pw;
                    if (ix < 0 || ix >= W)
                        continue;
                    acc = fmaf(xc[(long long)iy * W + ix], wc[ky * KW + kx], acc);
                }
            }
        }
        if (i0 < total)
            y[i0] = sluice_act(acc + (bias != nullptr ? bias[co] : 0.0f), act);
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_pool2d_ex(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                 const float* __restrict__ x, float* __restrict__ y,
                 int NC, int H, int W, int OH, int OW, int KH, int KW, int sh, int sw,
                 int ph, int pw, int peh, int pew, int dh, int dw, int mode)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const long long total = (long long)NC * OH * OW;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const int ox = (int)(i % OW);
        const int oy = (int)((i / OW) % OH);
        const long long p = i / ((long long)OW * OH);
        const float* src = x + p * H * W;
        float best = sluice_neg_inf(), sum = 0.0f;
        int cnt = 0, padded = 0;
        for (int ky = 0; ky < KH; ++ky) {
            const int iy = oy * sh + ky * dh - ph;
            for (int kx = 0; kx < KW; ++kx) {
                const int ix = ox * sw + kx * dw - pw;
                if (iy < 0 || ix < 0 || iy >= H || ix >= W) {
                    if (iy < H + peh && ix < W + pew)
                        ++padded;
                    continue;
                }
                const float v = src[(long long)iy * W + ix];
                best = fmaxf(best, v);
                sum += v;
                ++cnt;
            }
        }
        const int d = mode == 2 ? cnt + padded : cnt;
        float r;
        if (mode == 0)
            r = best;
        else if (mode == 1 || mode == 2)
            r = d == 0 ? 0.0f : sum / (float)d;
        else
            r = sluice_nan();
        y[i] = r;
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_lrn(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
           const float* __restrict__ x, float* __restrict__ y,
           int N, int C, int HW, int size, float alpha, float beta, float bias)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const int lo = (size - 1) / 2;
    const int hi = size / 2;
    const long long total = (long long)N * C * HW;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const long long at = i % HW;
        const int ch = (int)((i / HW) % C);
        const long long img = i / ((long long)HW * C);
        const int c0 = max(ch - lo, 0);
        const int c1 = min(ch + hi, C - 1);
        float sq = 0.0f;
        for (int k = c0; k <= c1; ++k) {
            const float v = x[(img * C + k) * HW + at];
            sq += v * v;
        }
        y[i] = x[i] / powf(bias + alpha / (float)size * sq, beta);
    }
}

extern "C" __global__ void __launch_bounds__(256)
sluice_interp(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
              const float* __restrict__ x, const float* __restrict__ idx,
              const float* __restrict__ w, float* __restrict__ y, int n, int taps, int src)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float acc = 0.0f;
        for (int t = 0; t < taps; ++t) {
            const long long at = i * taps + t;
            const float wt = w[at];
            if (wt != 0.0f) {
                const float j = idx[at];
                acc += wt * ((j >= 0.0f && j < (float)src) ? x[(int)j] : sluice_nan());
            }
        }
        y[i] = acc;
    }
}
