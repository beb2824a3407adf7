// Host-side launcher template; each generated unit instantiates one (dtype, head dim, causal).
#pragma once

#include <cuda_runtime.h>

#include "flash_fwd_kernel.cuh"

namespace flash {

template <typename Elem, int HeadDim, bool Causal>
int launch_fwd(const FlashFwdParams& params, cudaStream_t stream) {
    using Cfg = FwdConfig<HeadDim>;
    auto kernel = flash_fwd_kernel<Elem, HeadDim, Causal>;
    // More than 48 KB of dynamic shared memory must be opted into, once per device.
    static bool opted_in[64] = {};
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device >= 64 || !opted_in[device]) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   Cfg::kSmemBytes);
        if (err != cudaSuccess) return err;
        if (device < 64) opted_in[device] = true;
    }
    const dim3 grid((params.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, params.heads,
                    params.batch);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(params);
    return cudaGetLastError();
}

}  // namespace flash
