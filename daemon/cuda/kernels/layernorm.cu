// sluice_layernorm: for each of `rows` rows of `cols` f32 (row-major),
//   y = (x − mean) / sqrt(var + eps) · gamma + beta
// with the biased variance (divided by cols), computed in two passes (mean,
// then the mean of squared deviations) for accuracy. gamma and beta have
// `cols` elements; a null gamma means 1, a null beta means 0.
//
// One block per row, block reductions over static shared memory.
//
// Launch: block 256, grid rows, no dynamic shared memory.

#include "sluice.cuh"

extern "C" __global__ void __launch_bounds__(256)
sluice_layernorm(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                 const float* __restrict__ x, const float* __restrict__ gamma,
                 const float* __restrict__ beta, float* __restrict__ y,
                 int rows, int cols, float eps)
{
    SLUICE_PROLOGUE(ctl, kidx);
    __shared__ float scratch[32];

    const int row = blockIdx.x;
    if (row >= rows || cols <= 0) // block-uniform
        return;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    const float inv_n = 1.0f / (float)cols;

    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        s += xr[i];
    const float mean = sluice_block_sum(s, scratch) * inv_n;

    float q = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float d = xr[i] - mean;
        q = fmaf(d, d, q);
    }
    const float var = sluice_block_sum(q, scratch) * inv_n;
    const float rstd = rsqrtf(var + eps);

    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float g = gamma != nullptr ? gamma[i] : 1.0f;
        const float b = beta != nullptr ? beta[i] : 0.0f;
        yr[i] = fmaf((xr[i] - mean) * rstd, g, b);
    }
}
