// sluice_synthetic: a kernel whose every block runs for `block_ns`
// nanoseconds of %globaltimer, for preemption and scheduling experiments.
//
// Each warp spins: on every iteration lane 0 reads the preemption flag and
// %globaltimer and broadcasts the decision with a shuffle, so the warp leaves
// as a whole (the loop has no block barrier, so warps may leave
// independently). The launch requires blockDim.x to be a multiple of 32.
// Thread 0 writes 1.0f to sink[blockIdx.x] only when its warp ran the full
// time: after a preemption, the zeros in sink show which blocks were cut.
//
// Launch: any 1-D block of whole warps up to 1024 threads (the benchmarks
// give it the manifest kernel's block size; 128 by default), any 1-D grid
// (sink must hold gridDim.x floats); dynamic shared memory only reserves
// space (the benchmarks give the manifest kernel's, for its occupancy).

#include "sluice.cuh"

__device__ __forceinline__ unsigned long long sluice_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void __launch_bounds__(1024)
sluice_synthetic(const SluiceCtl* __restrict__ ctl, unsigned int kidx,
                 float* __restrict__ sink, unsigned long long block_ns)
{
    SLUICE_PROLOGUE(ctl, kidx);

    // Lane 0 decides for its warp (flag first, then time) and broadcasts the
    // decision, so every lane leaves the loop on the same iteration and the
    // full-mask shuffle always has all 32 lanes.
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned long long t0 = sluice_globaltimer();
    for (;;) {
        unsigned int state = 0u; // 0 spin, 1 time is up, 2 preempted
        if (lane == 0) {
            if (sluice_read_flag(ctl) != 0u)
                state = 2u;
            else if (sluice_globaltimer() - t0 >= block_ns)
                state = 1u;
        }
        state = __shfl_sync(0xffffffffu, state, 0);
        if (state == 2u)
            return; // warp-uniform; no barrier follows
        if (state == 1u)
            break;
    }
    if (threadIdx.x == 0)
        sink[blockIdx.x] = 1.0f;
}
