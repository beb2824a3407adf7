// Host-side launcher template; each generated unit instantiates one (dtype, head dim, causal).
#pragma once

#include <cuda_runtime.h>
#include <stdlib.h>

#include "flash_fwd_kernel.cuh"

namespace flash {

constexpr int kMaxDevices = 64;

// Query m16 tiles per warp in the 4-warp configuration (see FwdConfig): 2 measured 10-15 %
// faster than 1 on the H100 for both head dims (NOTES.md, v4/v5).
constexpr int kWideMTiles = 2;

template <typename Elem, int HeadDim, bool Causal, int Warps, int MTiles>
int launch_with(const FlashFwdParams& params, cudaStream_t stream, int device) {
    using Cfg = FwdConfig<HeadDim, Warps, MTiles>;
    auto kernel = flash_fwd_kernel<Elem, HeadDim, Causal, Warps, MTiles>;
    // More than 48 KB of dynamic shared memory must be opted into, once per device.
    static bool opted_in[kMaxDevices] = {};
    if (!opted_in[device]) {
        cudaError_t err = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
        if (err != cudaSuccess) return err;
        opted_in[device] = true;
    }
    const dim3 grid((params.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, params.heads,
                    params.batch);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(params);
    return cudaGetLastError();
}

// 4 warps when two such blocks fit in one SM's shared memory, else 8 (see FwdConfig).
// FLASH_ATTENTION_WARPS=4|8 overrides the choice, for tuning.
inline int warps_for(int device, int smem_bytes_4_warps) {
    static int chosen[kMaxDevices] = {};
    if (chosen[device] == 0) {
        int per_sm = 0;
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
        chosen[device] = per_sm >= 2 * (smem_bytes_4_warps + 1024) ? 4 : 8;
        const char* env = getenv("FLASH_ATTENTION_WARPS");
        if (env != nullptr && (atoi(env) == 4 || atoi(env) == 8)) chosen[device] = atoi(env);
    }
    return chosen[device];
}

template <typename Elem, int HeadDim, bool Causal>
int launch_fwd(const FlashFwdParams& params, cudaStream_t stream) {
    constexpr int kMTiles = kWideMTiles;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device >= kMaxDevices) return FLASH_ERR_UNSUPPORTED;
    if (warps_for(device, FwdConfig<HeadDim, 4, kMTiles>::kSmemBytes) == 4)
        return launch_with<Elem, HeadDim, Causal, 4, kMTiles>(params, stream, device);
    return launch_with<Elem, HeadDim, Causal, 8, 1>(params, stream, device);
}

}  // namespace flash
