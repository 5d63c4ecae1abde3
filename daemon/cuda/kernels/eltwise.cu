// sluice_eltwise: y[i] = op(a[i], b[i]) for i < n, f32.
//   op 0: a + b      op 1: relu(a + b)      op 2: relu(a)      op 3: gelu(a)
//   (tanh approximation). b may be null: ops 0 and 1 then add nothing; ops 2
//   and 3 never read it. An unknown op writes NaN (a builder bug made
//   visible without poisoning the shared context with a trap).
//   y must not alias a or b (every sluice kernel is idempotent).
//
// Launch: block 256, grid min(ceil(n/256), 65535), a grid-stride loop covers
// the rest; no dynamic shared memory.

#include "sluice.cuh"

extern "C" __global__ void __launch_bounds__(256)
sluice_eltwise(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
               const float* __restrict__ a, const float* __restrict__ b,
               float* __restrict__ y, int n, int op)
{
    SLUICE_PROLOGUE(ctl, kidx);

    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float va = a[i];
        float r;
        switch (op) {
        case 0:
            r = va + (b != nullptr ? b[i] : 0.0f);
            break;
        case 1:
            r = fmaxf(va + (b != nullptr ? b[i] : 0.0f), 0.0f);
            break;
        case 2:
            r = fmaxf(va, 0.0f);
            break;
        case 3:
            r = sluice_gelu(va);
            break;
        default:
            r = sluice_nan();
            break;
        }
        y[i] = r;
    }
}
