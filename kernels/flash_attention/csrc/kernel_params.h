// What both kernels receive: the caller's FlashFwdParams (the C ABI, flash_api.h) and what the
// launcher derives from them once per launch.
#pragma once

#include <stdint.h>

#include "flash_api.h"

namespace flash {

// Query head -> k/v head under grouped-query attention (flash_api.h): head / group, computed
// as (head * ceil(2^32 / group)) >> 32. That is exact while head * (group - 1) < 2^32, so for
// every head when heads <= 65535 (the binding's bound). In the sm_80 kernel an integer
// division, __umulhi, or this multiplier passed as a kernel argument of its own all moved
// ptxas's allocation at 255 registers (12-24 B of new spills in the non-causal units); read
// from the params struct, as here, every unit keeps its registers and spills (NOTES.md,
// 2026-11-25).
struct KvHeadMap {
    uint64_t multiplier = uint64_t(1) << 32;  // group 1: the head itself

    static KvHeadMap make(int group) {
        KvHeadMap map;
        map.multiplier = ((uint64_t(1) << 32) + uint64_t(group) - 1) / uint64_t(group);
        return map;
    }
    __host__ __device__ __forceinline__ int kv_head(int head) const {
        return (int)((uint64_t)(uint32_t)head * multiplier >> 32);
    }
};

struct FwdKernelParams : FlashFwdParams {
    KvHeadMap kv_heads;
};

inline FwdKernelParams kernel_params(const FlashFwdParams& params) {
    FwdKernelParams p;
    static_cast<FlashFwdParams&>(p) = params;
    p.kv_heads = KvHeadMap::make(params.q_heads_per_kv_head);
    return p;
}

}  // namespace flash
