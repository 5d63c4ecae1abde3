// Pooling, batch 1, NCHW f32.
//
// sluice_pool2d: y[C,OH,OW], square window k, square stride, symmetric
//   padding, OH = (H + 2·pad − k) / stride + 1 (likewise OW). mode 0: max
//   over the in-image elements of the window; mode 1: their mean (the count
//   excludes padding). A window with no in-image element (only possible with
//   pad ≥ k) yields 0. One thread per output element.
//   Launch: block 256, grid ceil(C·OH·OW / 256), no dynamic shared memory.
//
// sluice_global_avgpool: y[c] = mean of x[c, 0..HW). One block per channel,
//   a strided sum and a block reduction.
//   Launch: block 256, grid C, no dynamic shared memory.

#include "sluice.cuh"

extern "C" __global__ void __launch_bounds__(256)
sluice_pool2d(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
              const float* __restrict__ x, float* __restrict__ y,
              int C, int H, int W, int k, int stride, int pad, int mode)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const int OH = (H + 2 * pad - k) / stride + 1;
    const int OW = (W + 2 * pad - k) / stride + 1;
    const long long total = (long long)C * OH * OW;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;

    const int ow = (int)(i % OW);
    const long long t = i / OW;
    const int oh = (int)(t % OH);
    const int c = (int)(t / OH);
    const int h0 = oh * stride - pad;
    const int w0 = ow * stride - pad;
    const int hs = max(h0, 0);
    const int he = min(h0 + k, H);
    const int ws = max(w0, 0);
    const int we = min(w0 + k, W);
    const float* xc = x + (long long)c * H * W;

    float r;
    if (hs >= he || ws >= we) {
        r = 0.0f;
    } else if (mode == 0) {
        r = sluice_neg_inf();
        for (int h = hs; h < he; ++h)
            for (int w = ws; w < we; ++w)
                r = fmaxf(r, xc[(long long)h * W + w]);
    } else if (mode == 1) {
        float s = 0.0f;
        for (int h = hs; h < he; ++h)
            for (int w = ws; w < we; ++w)
                s += xc[(long long)h * W + w];
        r = s / (float)((he - hs) * (we - ws));
    } else {
        r = sluice_nan(); // unknown mode: a builder bug made visible
    }
    y[i] = r;
}

extern "C" __global__ void __launch_bounds__(256)
sluice_global_avgpool(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                      const float* __restrict__ x, float* __restrict__ y,
                      int C, int HW)
{
    SLUICE_PROLOGUE(ctl, kidx);
    __shared__ float scratch[32];

    const int c = blockIdx.x;
    if (c >= C) // block-uniform
        return;
    const float* xc = x + (long long)c * HW;
    float s = 0.0f;
    for (int i = threadIdx.x; i < HW; i += blockDim.x)
        s += xc[i];
    s = sluice_block_sum(s, scratch);
    if (threadIdx.x == 0)
        y[c] = HW > 0 ? s / (float)HW : 0.0f;
}
