// FlashAttention-3 style forward kernel for Hopper (sm_90a): TMA, mbarriers, wgmma.
//
// Blocks walk the (query block, head, batch) tiles: a persistent grid of one block per SM, or,
// for long causal launches, one block per tile (TileSchedule and the launcher's sm90_plan say
// why). A block is a producer warpgroup and two or three consumer warpgroups (Sm90Traits); a
// solo block (D = 64 causal, flash_fwd_sm90_solo_kernel) is one warpgroup that issues its own
// loads, one tile, three blocks an SM.
// Warpgroup 0 is the producer: one of its threads streams each tile's Q and its K, V tiles of
// kBlockN keys into a ring of kStages shared-memory buffers with TMA, each buffer guarded by
// a "full" mbarrier (TMA bytes landed) and an "empty" one (every consumer warp is done with
// it); Q has its own pair, so the next tile's Q and first K/V tiles load while the consumers
// finish the current one. The other warpgroups are consumers of 64 rows each: S = Q K^T with
// both operands in shared memory (wgmma, K-major), masking and the online softmax in
// registers (mask.h and softmax.h, as in the sm_80 kernel: the wgmma accumulator holds the
// same m16n8 fragments, one m16 tile per warp), then O += P V with P from registers and V
// transposed from shared memory. The producer gives its registers to the consumers
// (setmaxnreg); each consumer overlaps its softmax with its own next S = Q K^T, and the
// consumers take turns issuing MMAs so that one's softmax runs under the others' MMAs. O is
// normalized in registers, staged in shared memory and stored by TMA, each warp its own rows.
// The parts: flash_fwd_sm90_schedule.cuh (shared memory, tile order, ring positions, the
// producer), flash_fwd_sm90_choices.cuh (Sm90Choices), flash_fwd_sm90_mainloop.cuh (the
// consumers' key loop) and flash_fwd_sm90_epilogue.cuh (O out); this file holds the kernels.
#pragma once

#include <stdint.h>

#include "flash_api.h"
#include "flash_fwd_sm90_mainloop.cuh"
#include "flash_fwd_sm90_schedule.cuh"
#include "kernel_params.h"
#include "kernel_traits.h"
#include "sm90_utils.h"

namespace flash {

// The solo block's loads (Sm90Traits::kSolo): thread 0 issues Q and the first kStages K and V
// tiles, then each tile j + kStages into the buffer tile j leaves, once the warpgroup's MMA that
// read it has been waited for (a wgmma completes for its whole warpgroup).
template <typename T>
struct SoloLoads {
    const Sm90Smem<T>* sm;
    const CUtensorMap *tma_q, *tma_k, *tma_v;
    Tile tile;
    int kv_head;
    __device__ __forceinline__ void load(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                         int bytes, int rows, int row0, int head,
                                         uint64_t policy) const {
        sm90::mbarrier_arrive_expect_tx(bar, bytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
            sm90::tma_load_4d_hint(dst + cb * rows * T::kRowBytes, map, bar, cb * 64, row0, head,
                                   tile.batch, policy);
    }
    __device__ __forceinline__ void q() const {
        load(sm->q(0), tma_q, sm->full_q(0), T::kQBytes, T::kBlockM, tile.m_block * T::kBlockM,
             tile.head, sm90::kEvictFirst);
    }
    __device__ __forceinline__ void k(int j) const {
        const int s = j % T::kStages;
        load(sm->k(s), tma_k, sm->full_k(s), T::kTileBytes, T::kBlockN, j * T::kBlockN, kv_head,
             sm90::kEvictLast);
    }
    __device__ __forceinline__ void v(int j) const {
        const int s = j % T::kStages;
        load(sm->v(s), tma_v, sm->full_v(s), T::kTileBytes, T::kBlockN, j * T::kBlockN, kv_head,
             sm90::kEvictLast);
    }
    __device__ __forceinline__ void k_done(int j) const {
        if (threadIdx.x == 0 && j + T::kStages < tile.n_blocks) k(j + T::kStages);
    }
    __device__ __forceinline__ void v_done(int j) const {
        if (threadIdx.x == 0 && j + T::kStages < tile.n_blocks) v(j + T::kStages);
    }
};

// The ones the tensor core sums the rows of P against (T::kRowSumMma; 1.0 is 0x3C00 in fp16,
// 0x3F80 in bf16; two a word), written before any wgmma reads them: the async proxy's fence
// here, then the block's barrier after.
template <typename T>
__device__ __forceinline__ void write_ones(const Sm90Smem<T>& sm, int tid) {
    constexpr uint32_t pair = __is_same(typename T::Elem, __half) ? 0x3C003C00u : 0x3F803F80u;
    for (int i = tid; i < T::kOnesBytes / 4; i += T::kThreads)
        reinterpret_cast<uint32_t*>(sm.ones_generic())[i] = pair;
    sm90::fence_proxy_async();
}

// One warpgroup, one tile, no producer warpgroup (Sm90Traits::kSolo): three blocks share an SM
// and the hardware overlaps one's tile boundaries with the others' key loops, as cuDNN's
// 64 x 128 one-warpgroup kernels do (NOTES.md, h43).
template <typename T, bool Causal>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    flash_fwd_sm90_solo_kernel(const FwdKernelParams p, const __grid_constant__ CUtensorMap tma_q,
                               const __grid_constant__ CUtensorMap tma_k,
                               const __grid_constant__ CUtensorMap tma_v,
                               const __grid_constant__ CUtensorMap tma_o) {
    static_assert(T::kSolo && T::kThreads == 128);
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[Sm90Smem<T>::kBarriers + 1];
    Sm90Smem<T> sm;
    sm.place(smem_raw, bars);
    const int tid = threadIdx.x;
    if constexpr (T::kRowSumMma) write_ones<T>(sm, tid);  // h47 (FLASH_SM90_ROW_SUM=3: not)
    const TileSchedule<T, Causal> schedule(p.seqlen_q, p.heads, p.batch, false);
    const Tile tile = schedule.tile(p, blockIdx.x, 0);
    const SoloLoads<T> loads{&sm, &tma_q, &tma_k, &tma_v, tile, p.kv_heads.kv_head(tile.head)};
    if (tid == 0) {
        sm90::mbarrier_init(sm.full_q(0), 1);
        for (int s = 0; s < T::kStages; ++s) {
            sm90::mbarrier_init(sm.full_k(s), 1);
            sm90::mbarrier_init(sm.full_v(s), 1);
        }
        sm90::fence_barrier_init();
        if (tile.n_blocks > 0) {
            loads.q();
            for (int j = 0; j < T::kStages && j < tile.n_blocks; ++j) {
                loads.k(j);
                loads.v(j);
            }
        }
    }
    __syncthreads();
    const Pingpong<1> turns{0};
    consume_tile<T, Causal>(p, sm, tile, Sm90Ring<T, Causal>{}, QPosition<T>(0), turns, &tma_o,
                            tid / 32, tid % 32, loads);
    if (tid % 32 == 0) sm90::bulk_wait_group<0>();
}

// The persistent or one-block-per-tile grid; with a TailSplit (non-causal only), the grid's
// last round split over the keys: the whole rounds' units walked as without, then the block's
// pieces of the last round (flash_fwd_sm90_split.cuh).
template <typename T, bool Causal, typename Tail = NoTailSplit>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_fwd_sm90_kernel(const FwdKernelParams p, const __grid_constant__ CUtensorMap tma_q,
                          const __grid_constant__ CUtensorMap tma_k,
                          const __grid_constant__ CUtensorMap tma_v,
                          const __grid_constant__ CUtensorMap tma_o, const bool paired_causal,
                          const Tail tail) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[Sm90Smem<T>::kBarriers + 1];
    Sm90Smem<T> sm;
    sm.place(smem_raw, bars);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const TileSchedule<T, Causal> schedule(p.seqlen_q, p.heads, p.batch, paired_causal,
                                           tail.whole_units());

    if (tid == 0) {
        for (int qs = 0; qs < T::kQStages; ++qs) {
            sm90::mbarrier_init(sm.full_q(qs), 1);
            sm90::mbarrier_init(sm.empty_q(qs), T::kWarps);  // one arrival per consumer warp
        }
        for (int s = 0; s < T::kStages; ++s) {
            sm90::mbarrier_init(sm.full_k(s), 1);
            sm90::mbarrier_init(sm.full_v(s), 1);
            sm90::mbarrier_init(sm.empty_k(s), T::kWarps);  // one arrival per consumer warp
            sm90::mbarrier_init(sm.empty_v(s), T::kWarps);
        }
        sm90::fence_barrier_init();
    }
    if constexpr (T::kRowSumMma) write_ones<T>(sm, tid);
    __syncthreads();

    if (warp < 4) {
        sm90::regs_release<T::kProducerRegs>();
        if (warp == 0 && lane == 0) produce<T, Causal>(p, sm, schedule, &tma_q, &tma_k, &tma_v, tail);
    } else {
        sm90::regs_claim<T::kConsumerRegs>();
        consume<T, Causal>(p, sm, schedule, &tma_o, warp - 4, lane, tail);
    }
}

}  // namespace flash
