// FlashAttention-3 style forward kernel for Hopper (sm_90a): TMA, mbarriers, wgmma.
//
// A block of three warpgroups owns kBlockM = 128 query rows of one (batch, head). Warpgroup 0
// is the producer: one of its threads streams Q once and K, V tiles of kBlockN keys into a
// ring of kStages shared-memory buffers with TMA, each buffer guarded by a "full" mbarrier
// (TMA bytes landed) and an "empty" one (every consumer warp is done with it). Warpgroups 1
// and 2 are consumers of 64 rows each: S = Q K^T with both operands in shared memory
// (wgmma, K-major), masking and the online softmax in registers (mask.h and softmax.h, as in
// the sm_80 kernel: the wgmma accumulator holds the same m16n8 fragments, one m16 tile per
// warp), then O += P V with P from registers and V transposed from shared memory. The
// producer gives its registers to the consumers (setmaxnreg). While one consumer warpgroup
// runs its softmax the other's MMAs keep the tensor cores busy.
#pragma once

#include <stdint.h>

#include "flash_api.h"
#include "mask.h"
#include "sm90_utils.h"
#include "softmax.h"
#include "utils.h"

namespace flash {

template <typename Elem_, int HeadDim, int BlockN, int Stages>
struct Sm90Traits {
    using Elem = Elem_;
    static constexpr int kHeadDim = HeadDim;
    static constexpr int kConsumerWarpgroups = 2;
    static constexpr int kThreads = 128 * (kConsumerWarpgroups + 1);  // + the producer
    static constexpr int kBlockM = 64 * kConsumerWarpgroups;
    static constexpr int kBlockN = BlockN;
    static constexpr int kStages = Stages;
    // mask.h and softmax.h see each consumer warp as the owner of one m16 tile.
    static constexpr int kMTiles = 1;
    static constexpr int kWarps = 4 * kConsumerWarpgroups;  // consumer warps
    static constexpr int kNTiles = BlockN / 8;
    static constexpr int kDTiles = HeadDim / 8;
    static constexpr int kKSteps = HeadDim / 16;
    // Tiles are stored as column blocks of 64 elements (128-byte rows, TMA's 128-byte swizzle
    // limit): a row r, column c element lives in block c / 64 at row r.
    static constexpr int kColBlocks = HeadDim / 64;
    static constexpr int kRowBytes = 128;
    static constexpr int kQBytes = kBlockM * HeadDim * 2;
    static constexpr int kTileBytes = BlockN * HeadDim * 2;  // one K or V tile
    // + 1 KB to align the buffers to the 1024-byte swizzle atom.
    static constexpr int kSmemBytes = kQBytes + 2 * Stages * kTileBytes + 1024;
    // 24 x 128 + 240 x 256 = 64,512 of the SM's 65,536 registers.
    static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
    static_assert(sizeof(Elem) == 2 && HeadDim % 64 == 0 && BlockN % 16 == 0);
    static_assert(BlockN <= 256 && HeadDim <= 256, "wgmma N and TMA box limits");

    static __device__ __forceinline__ int tile_row(int mt, int warp) {
        return (mt * kWarps + warp) * 16;
    }
};

// Shared-memory layout and pipeline barriers of one block.
template <typename T>
struct Sm90Smem {
    uint32_t base;     // shared address of the 1024-aligned buffers
    uint8_t* generic;  // the same, as a generic pointer
    uint64_t* bars;    // q, full_k[S], full_v[S], empty_k[S], empty_v[S]

    __device__ __forceinline__ uint32_t q() const { return base; }
    __device__ __forceinline__ uint32_t k(int s) const { return base + T::kQBytes + s * T::kTileBytes; }
    __device__ __forceinline__ uint32_t v(int s) const {
        return base + T::kQBytes + (T::kStages + s) * T::kTileBytes;
    }
    __device__ __forceinline__ uint32_t bar(int i) const { return smem_u32(bars + i); }
    __device__ __forceinline__ uint32_t bar_q() const { return bar(0); }
    __device__ __forceinline__ uint32_t full_k(int s) const { return bar(1 + s); }
    __device__ __forceinline__ uint32_t full_v(int s) const { return bar(1 + T::kStages + s); }
    __device__ __forceinline__ uint32_t empty_k(int s) const { return bar(1 + 2 * T::kStages + s); }
    __device__ __forceinline__ uint32_t empty_v(int s) const { return bar(1 + 3 * T::kStages + s); }
    // Byte offset of 16-byte chunk `chunk` (of 8 per 128-byte row) of row r in a column
    // block: the 128-byte swizzle TMA applies (chunk ^ (r % 8)).
    static __device__ __forceinline__ int swizzled_offset(int r, int chunk) {
        return r * T::kRowBytes + ((chunk ^ (r & 7)) << 4);
    }
};

// One thread streams Q, then K_j and V_j into the ring; a buffer is refilled once all
// consumer warps have released it.
template <typename T>
__device__ __forceinline__ void produce(const Sm90Smem<T>& sm, const CUtensorMap* tma_q,
                                        const CUtensorMap* tma_k, const CUtensorMap* tma_v,
                                        int m0, int head, int batch, int n_blocks) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kKVBlockBytes = T::kBlockN * T::kRowBytes;
    sm90::mbarrier_arrive_expect_tx(sm.bar_q(), T::kQBytes);
#pragma unroll
    for (int cb = 0; cb < T::kColBlocks; ++cb)
        sm90::tma_load_4d(sm.q() + cb * kQBlockBytes, tma_q, sm.bar_q(), cb * 64, m0, head, batch);
    for (int j = 0; j < n_blocks; ++j) {
        const int stage = j % T::kStages;
        const uint32_t phase = (j / T::kStages) & 1;
        // A fresh barrier counts as having completed the phase before its first: the first
        // pass over the ring does not wait.
        sm90::mbarrier_wait(sm.empty_k(stage), phase ^ 1);
        sm90::mbarrier_arrive_expect_tx(sm.full_k(stage), T::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
            sm90::tma_load_4d(sm.k(stage) + cb * kKVBlockBytes, tma_k, sm.full_k(stage), cb * 64,
                              j * T::kBlockN, head, batch);
        sm90::mbarrier_wait(sm.empty_v(stage), phase ^ 1);
        sm90::mbarrier_arrive_expect_tx(sm.full_v(stage), T::kTileBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
            sm90::tma_load_4d(sm.v(stage) + cb * kKVBlockBytes, tma_v, sm.full_v(stage), cb * 64,
                              j * T::kBlockN, head, batch);
    }
}

// S = Q K_j^T for this consumer warpgroup's 64 rows (scale_d = 0 on the first k-step).
template <typename T>
__device__ __forceinline__ void qk_wgmma(float (&s)[T::kNTiles][4], const Sm90Smem<T>& sm,
                                         int stage, int consumer_wg) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kKVBlockBytes = T::kBlockN * T::kRowBytes;
    const uint32_t q_rows = sm.q() + consumer_wg * 64 * T::kRowBytes;
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
        // 16 columns = 32 bytes per k-step, four k-steps per 128-byte column block.
        const int cb = ks / 4, in_row = (ks % 4) * 32;
        const uint64_t desc_q = sm90::smem_descriptor(q_rows + cb * kQBlockBytes + in_row, 0);
        const uint64_t desc_k = sm90::smem_descriptor(sm.k(stage) + cb * kKVBlockBytes + in_row, 0);
        sm90::wgmma_ss<typename T::Elem>(s, desc_q, desc_k, ks > 0);
    }
}

// P (probabilities, fp32 C fragments) as the 16-bit A fragments of P V, one per 16 keys.
template <typename T>
__device__ __forceinline__ void pack_probabilities(uint32_t (&pa)[T::kBlockN / 16][4],
                                                   const float (&p)[T::kNTiles][4]) {
    using Elem = typename T::Elem;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
        pa[kk][0] = Mma<Elem>::pack(p[2 * kk][0], p[2 * kk][1]);
        pa[kk][1] = Mma<Elem>::pack(p[2 * kk][2], p[2 * kk][3]);
        pa[kk][2] = Mma<Elem>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        pa[kk][3] = Mma<Elem>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    }
}

// O += P V_j. P is packed before the wgmma fence: registers written between the fence and a
// wgmma that reads them make ptxas insert a fence before every wgmma (warning C7519).
template <typename T>
__device__ __forceinline__ void pv_wgmma(float (&o_acc)[T::kDTiles][4],
                                         const uint32_t (&pa)[T::kBlockN / 16][4],
                                         const Sm90Smem<T>& sm, int stage) {
    // MN-major V: 16 keys = 16 rows of 128 bytes per k-step; the next 64 columns of the head
    // dim are the next column block (the descriptor's leading offset).
    constexpr uint32_t kColBlockBytes = T::kBlockN * T::kRowBytes;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
        const uint64_t desc_v =
            sm90::smem_descriptor(sm.v(stage) + kk * 16 * T::kRowBytes, kColBlockBytes);
        sm90::wgmma_rs<typename T::Elem>(o_acc, pa[kk], desc_v, 1);
    }
}

// Normalizes O, writes lse, and stages O in this warpgroup's own rows of the Q buffer (the
// other warpgroup never reads them) for 16-byte coalesced global stores.
template <typename T>
__device__ __forceinline__ void write_output_sm90(float (&o_acc)[T::kDTiles][4],
                                                  const OnlineSoftmax<1>& softmax,
                                                  const Sm90Smem<T>& sm, typename T::Elem* o,
                                                  int64_t o_row_stride, float* lse, int m0,
                                                  int seqlen_q, int consumer_warp, int lane) {
    using Elem = typename T::Elem;
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes;
    uint8_t* sq = sm.generic;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float sum = softmax.total(0, h);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int r = consumer_warp * 16 + lane / 4 + h * 8;
        if (lane % 4 == 0 && m0 + r < seqlen_q) lse[m0 + r] = softmax.lse(0, h, sum);
#pragma unroll
        for (int t = 0; t < T::kDTiles; ++t) {
            const int offset = (t / 8) * kQBlockBytes + Sm90Smem<T>::swizzled_offset(r, t % 8);
            *reinterpret_cast<uint32_t*>(sq + offset + (lane % 4) * 4) =
                Mma<Elem>::pack(o_acc[t][2 * h] * inv, o_acc[t][2 * h + 1] * inv);
        }
    }
    const int consumer_wg = consumer_warp / 4, wg_tid = (consumer_warp % 4) * 32 + lane;
    sm90::named_barrier_sync(1 + consumer_wg, 128);
    constexpr int kChunks = T::kHeadDim / 8;
#pragma unroll
    for (int i = 0; i < 64 * kChunks / 128; ++i) {
        const int idx = i * 128 + wg_tid;
        const int r = consumer_wg * 64 + idx / kChunks, c = idx % kChunks;
        if (m0 + r < seqlen_q) {
            const int offset = (c / 8) * kQBlockBytes + Sm90Smem<T>::swizzled_offset(r, c % 8);
            *reinterpret_cast<uint4*>(o + (int64_t)(m0 + r) * o_row_stride + c * 8) =
                *reinterpret_cast<const uint4*>(sq + offset);
        }
    }
}

// Turn-taking of the two consumer warpgroups over MMA issue ("pingpong"): a warpgroup issues
// its MMAs when the other has issued its own, so that one's softmax runs under the other's
// MMAs (NOTES.md, h2). Hardware barriers 3 and 4 (1 and 2 are per warpgroup).
struct Pingpong {
    int consumer_wg;
    __device__ __forceinline__ void start() const {
        if (consumer_wg == 1) sm90::named_barrier_arrive(3, 256);  // warpgroup 0 first
    }
    __device__ __forceinline__ void take_turn() const {
        sm90::named_barrier_sync(3 + consumer_wg, 256);
    }
    // Warpgroup 1's last turn is not passed on: warpgroup 0 has no turn left to take.
    __device__ __forceinline__ void pass_turn(bool last) const {
        if (!(last && consumer_wg == 1))
            sm90::named_barrier_arrive(3 + (consumer_wg ^ 1), 256);
    }
};

// One consumer warpgroup: 64 query rows against every K/V tile of the block.
template <typename T, bool Causal>
__device__ __forceinline__ void consume(const FlashFwdParams& p, const Sm90Smem<T>& sm, int m0,
                                        int n_blocks, int head, int batch, int consumer_warp,
                                        int lane) {
    using Elem = typename T::Elem;
    const int consumer_wg = consumer_warp / 4;
    const int causal_offset = p.seqlen_k - p.seqlen_q;
    const float scale_log2 = score_scale_log2(p.scale);
    float o_acc[1][T::kDTiles][4];
#pragma unroll
    for (int t = 0; t < T::kDTiles; ++t)
#pragma unroll
        for (int c = 0; c < 4; ++c) o_acc[0][t][c] = 0.f;
    OnlineSoftmax<1> softmax;
    const Pingpong turns{consumer_wg};

    if (n_blocks > 0) {
        sm90::mbarrier_wait(sm.bar_q(), 0);
        if (p.scale < 0.f) {
            // Fold the sign into this warpgroup's Q rows (softmax.h), then hand them to wgmma.
            constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kRowsBytes = 64 * T::kRowBytes;
            const int wg_tid = (consumer_warp % 4) * 32 + lane;
#pragma unroll
            for (int cb = 0; cb < T::kColBlocks; ++cb)
                negate_tile<kRowsBytes / 2, 128>(
                    reinterpret_cast<Elem*>(sm.generic + cb * kQBlockBytes + consumer_wg * kRowsBytes),
                    wg_tid);
            sm90::fence_proxy_async();
            sm90::named_barrier_sync(1 + consumer_wg, 128);
        }
        turns.start();
    }
    // Masks tile j's raw scores where needed and folds them into the softmax state.
    auto score_tile = [&](float (&s)[1][T::kNTiles][4], int j, float (&correction)[1][2]) {
        const int n0 = j * T::kBlockN;
        const bool tail = n0 + T::kBlockN > p.seqlen_k;
        const bool diagonal = Causal && n0 + T::kBlockN - 1 > m0 + causal_offset;
        if (tail || diagonal)
            mask_scores<T, Causal>(s, m0, n0, p.seqlen_k, causal_offset, consumer_warp, lane);
        return softmax.fold(s, correction, scale_log2);
    };
    auto stage_of = [](int j) { return j % T::kStages; };
    auto phase_of = [](int j) { return uint32_t((j / T::kStages) & 1); };

    // S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued together; the softmax of tile j + 1
    // runs while P_j V_j is in flight, and O is rescaled once it has landed (NOTES.md, h2).
    if (n_blocks > 0) {
        float s[1][T::kNTiles][4], correction[1][2];
        uint32_t pa[T::kBlockN / 16][4];
        sm90::mbarrier_wait(sm.full_k(0), 0);
        turns.take_turn();
        sm90::wgmma_fence();
        qk_wgmma<T>(s[0], sm, 0, consumer_wg);
        sm90::wgmma_commit();
        turns.pass_turn(false);
        sm90::wgmma_wait<0>();
        sm90::fence_registers(s[0]);
        if (lane == 0) sm90::mbarrier_arrive(sm.empty_k(0));
        score_tile(s, 0, correction);  // o_acc is still zero: nothing to rescale
        pack_probabilities<T>(pa, s[0]);
        for (int j = 1; j < n_blocks; ++j) {
            const int stage = stage_of(j), prev = stage_of(j - 1);
            sm90::mbarrier_wait(sm.full_k(stage), phase_of(j));
            sm90::mbarrier_wait(sm.full_v(prev), phase_of(j - 1));
            turns.take_turn();
            sm90::wgmma_fence();
            qk_wgmma<T>(s[0], sm, stage, consumer_wg);
            sm90::wgmma_commit();
            pv_wgmma<T>(o_acc[0], pa, sm, prev);
            sm90::wgmma_commit();
            turns.pass_turn(false);
            sm90::wgmma_wait<1>();  // S_j landed; P_{j-1} V_{j-1} may still run
            sm90::fence_registers(s[0]);
            if (lane == 0) sm90::mbarrier_arrive(sm.empty_k(stage));
            const bool moved = score_tile(s, j, correction);
            sm90::wgmma_wait<0>();
            sm90::fence_registers(o_acc[0]);
            if (lane == 0) sm90::mbarrier_arrive(sm.empty_v(prev));
            if (moved) OnlineSoftmax<1>::rescale_output(o_acc, correction);
            pack_probabilities<T>(pa, s[0]);
        }
        const int last = stage_of(n_blocks - 1);
        sm90::mbarrier_wait(sm.full_v(last), phase_of(n_blocks - 1));
        turns.take_turn();
        sm90::wgmma_fence();
        pv_wgmma<T>(o_acc[0], pa, sm, last);
        sm90::wgmma_commit();
        turns.pass_turn(true);
        sm90::wgmma_wait<0>();
        sm90::fence_registers(o_acc[0]);
        if (lane == 0) sm90::mbarrier_arrive(sm.empty_v(last));
    }

    Elem* o = static_cast<Elem*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
    float* lse = p.lse + ((int64_t)batch * p.heads + head) * p.seqlen_q;
    write_output_sm90<T>(o_acc[0], softmax, sm, o, p.o_row_stride, lse, m0, p.seqlen_q,
                         consumer_warp, lane);
}

template <typename T, bool Causal>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_fwd_sm90_kernel(const FlashFwdParams p, const __grid_constant__ CUtensorMap tma_q,
                          const __grid_constant__ CUtensorMap tma_k,
                          const __grid_constant__ CUtensorMap tma_v) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[1 + 4 * T::kStages];
    Sm90Smem<T> sm;
    const uint32_t raw = smem_u32(smem_raw);
    sm.base = (raw + 1023) & ~1023u;
    sm.generic = smem_raw + (sm.base - raw);
    sm.bars = bars;

    // Causal blocks near the end of the sequence carry the most work: start them first.
    const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int head = blockIdx.y, batch = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = m_block * T::kBlockM;
    int n_end = p.seqlen_k;
    if (Causal) n_end = min(n_end, m0 + T::kBlockM + p.seqlen_k - p.seqlen_q);
    const int n_blocks = n_end > 0 ? (n_end + T::kBlockN - 1) / T::kBlockN : 0;

    if (tid == 0) {
        sm90::mbarrier_init(sm.bar_q(), 1);
        for (int s = 0; s < T::kStages; ++s) {
            sm90::mbarrier_init(sm.full_k(s), 1);
            sm90::mbarrier_init(sm.full_v(s), 1);
            sm90::mbarrier_init(sm.empty_k(s), T::kWarps);  // one arrival per consumer warp
            sm90::mbarrier_init(sm.empty_v(s), T::kWarps);
        }
        sm90::fence_barrier_init();
    }
    __syncthreads();

    if (warp < 4) {
        sm90::regs_release<T::kProducerRegs>();
        if (warp == 0 && lane == 0 && n_blocks > 0)
            produce<T>(sm, &tma_q, &tma_k, &tma_v, m0, head, batch, n_blocks);
    } else {
        sm90::regs_claim<T::kConsumerRegs>();
        consume<T, Causal>(p, sm, m0, n_blocks, head, batch, warp - 4, lane);
    }
}

}  // namespace flash
