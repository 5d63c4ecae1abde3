// sluice_softmax: y[r, :] = softmax(x[r, :]) for each of `rows` rows of
// `cols` f32, row-major. Max-subtracted: y = exp(x − max) / Σ exp(x − max).
//
// One block per row: a strided max, a block max reduction, a strided sum of
// exponentials, a block sum reduction, then the scaled write. The reduction
// buffer is static shared memory (32 floats).
//
// Launch: block 256, grid rows, no dynamic shared memory.

#include "sluice.cuh"

extern "C" __global__ void __launch_bounds__(256)
sluice_softmax(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
               const float* __restrict__ x, float* __restrict__ y,
               int rows, int cols)
{
    SLUICE_PROLOGUE(ctl, kidx);
    __shared__ float scratch[32];

    const int row = blockIdx.x;
    if (row >= rows) // block-uniform
        return;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;

    float m = sluice_neg_inf();
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        m = fmaxf(m, xr[i]);
    m = sluice_block_max(m, scratch);

    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        s += expf(xr[i] - m);
    s = sluice_block_sum(s, scratch);

    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        yr[i] = expf(xr[i] - m) * inv;
}
