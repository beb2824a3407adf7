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
#pragma once

#include <stdint.h>

#include "flash_api.h"
#include "kernel_params.h"
#include "kernel_traits.h"
#include "mask.h"
#include "sm90_utils.h"
#include "softmax.h"
#include "switches.h"
#include "utils.h"

namespace flash {

// Shared-memory layout and pipeline barriers of one block.
template <typename T>
struct Sm90Smem {
    uint32_t base;     // shared address of the 1024-aligned buffers
    uint8_t* generic;  // the same, as a generic pointer
    // full_q[QS], empty_q[QS], full_k[S], full_v[S], empty_k[S], empty_v[S]
    uint64_t* bars;
    static constexpr int kQBars = 2 * T::kQStages;
    static constexpr int kBarriers = kQBars + 4 * T::kStages;
    // bars[kBarriers]: a word no access ever reaches (sm90::order_wait_after's store target).

    // The block's buffers in its dynamic shared memory `raw`, from its first 1024-byte boundary
    // (the 128-byte swizzle's atom), and its barriers.
    __device__ __forceinline__ void place(uint8_t* raw, uint64_t* block_bars) {
        const uint32_t address = smem_u32(raw);
        base = (address + 1023) & ~1023u;
        generic = raw + (base - address);
        bars = block_bars;
    }

    // Q buffer qs (of kQStages), then O's staging buffer, then the K and V rings.
    __device__ __forceinline__ uint32_t q(int qs) const { return base + qs * T::kQBytes; }
    __device__ __forceinline__ uint8_t* q_generic(int qs) const {
        return generic + qs * T::kQBytes;
    }
    static constexpr int kOOffset = T::kSolo ? 0 : T::kQStages * T::kQBytes;
    __device__ __forceinline__ uint8_t* o_generic() const { return generic + kOOffset; }
    __device__ __forceinline__ uint32_t o() const { return base + kOOffset; }
    __device__ __forceinline__ uint32_t k(int s) const {
        return base + T::kQOBytes + s * T::kTileBytes;
    }
    __device__ __forceinline__ uint32_t v(int s) const {
        return base + T::kQOBytes + (T::kStages + s) * T::kTileBytes;
    }
    // The block of ones the tensor core sums the rows of P against (T::kRowSumMma), after the V
    // ring, 1024-aligned.
    __device__ __forceinline__ uint32_t ones() const {
        return base + T::kQOBytes + 2 * T::kStages * T::kTileBytes;
    }
    __device__ __forceinline__ uint8_t* ones_generic() const {
        return generic + T::kQOBytes + 2 * T::kStages * T::kTileBytes;
    }
    __device__ __forceinline__ uint32_t bar(int i) const { return smem_u32(bars + i); }
    __device__ __forceinline__ uint32_t scratch() const { return bar(kBarriers); }
    __device__ __forceinline__ uint32_t full_q(int qs) const { return bar(qs); }
    __device__ __forceinline__ uint32_t empty_q(int qs) const { return bar(T::kQStages + qs); }
    __device__ __forceinline__ uint32_t full_k(int s) const { return bar(kQBars + s); }
    __device__ __forceinline__ uint32_t full_v(int s) const {
        return bar(kQBars + T::kStages + s);
    }
    __device__ __forceinline__ uint32_t empty_k(int s) const {
        return bar(kQBars + 2 * T::kStages + s);
    }
    __device__ __forceinline__ uint32_t empty_v(int s) const {
        return bar(kQBars + 3 * T::kStages + s);
    }
    // Byte offset of 16-byte chunk `chunk` (of 8 per 128-byte row) of row r in a column
    // block: the 128-byte swizzle TMA applies (chunk ^ (r % 8)).
    static __device__ __forceinline__ int swizzled_offset(int r, int chunk) {
        return r * T::kRowBytes + ((chunk ^ (r & 7)) << 4);
    }
};

// The schedule: the tiles are grouped into work units, and a grid of G blocks takes them in
// rounds of G (UnitWalk), or, one block per tile, one each. The query block is the fastest
// index, so the blocks running at once share a few heads' K and V in L2 (with the head fastest
// they would stream one head each: 8x the DRAM traffic at S = 1024, measured 0.6x at D = 128).
// Not causal: a unit is one tile. Causal, one block per tile (the launcher's choice for long
// sequences): a unit is one tile, each head's heaviest query blocks (the last ones, which see
// the most keys) first.
// Causal and paired (a persistent grid): a unit is a head's query blocks M-1-i and i (the
// heaviest with the lightest, in that order), so that every unit costs about M + 1 key tiles
// and the round-robin gives each SM an even share (a round-robin over single causal tiles left
// the SM with the heaviest sum last: 0.66x at S = 16k, NOTES.md, h3 and h4).
struct Tile {
    int m_block, head, batch, n_blocks;
};
template <typename T, bool Causal>
struct TileSchedule {
    bool paired;
    int m_blocks, units_per_head, units;

    __host__ __device__ __forceinline__ TileSchedule(int seqlen_q, int heads, int batch,
                                                     bool paired_causal) {
        paired = Causal && paired_causal;
        m_blocks = (seqlen_q + T::kBlockM - 1) / T::kBlockM;
        units_per_head = paired ? (m_blocks + 1) / 2 : m_blocks;
        units = (int)((int64_t)units_per_head * heads * batch);  // the launcher checks the range
    }
    // Tiles of unit u: two, or one where the pair's two query blocks are the same one.
    __device__ __forceinline__ int tiles_in(int u) const {
        if (!paired) return 1;
        const int i = u % units_per_head;
        return 2 * i + 1 == m_blocks ? 1 : 2;
    }
    // Tile k (0 or 1) of unit u.
    __device__ __forceinline__ Tile tile(const FlashFwdParams& p, int u, int k) const {
        const int i = u % units_per_head, hb = u / units_per_head;
        Tile tile;
        if (paired)
            tile.m_block = k == 0 ? m_blocks - 1 - i : i;
        else
            tile.m_block = Causal ? m_blocks - 1 - i : i;
        tile.head = hb % p.heads;
        tile.batch = hb / p.heads;
        // Keys at or past n_end are visible to no row of the tile (bottom-right causal
        // alignment).
        int n_end = p.seqlen_k;
        if (Causal) n_end = min(n_end, (tile.m_block + 1) * T::kBlockM + p.seqlen_k - p.seqlen_q);
        tile.n_blocks = n_end > 0 ? (n_end + T::kBlockN - 1) / T::kBlockN : 0;
        return tile;
    }
};

// A block's walk over its work units, in rounds of G (the grid's blocks): in round r block b
// takes unit r * G + b, or, rotated, r * G + (b + r) % G (the same units per round, each
// block's place among them moving on by one a round). Rotated for the non-causal launches
// (FLASH_SM90_ROTATE): a unit's cost is its rows' share of a block where a head's last query
// block is partial (three consumers: 2048 rows are 10 2/3 blocks of 192, 4096 21 1/3), and with
// G a multiple of the query blocks per head (132 = 6 x 22 = 12 x 11) block b met the same
// query block of every head: 6 blocks (4096) or 12 (2048) took every partial unit and 44 took
// 22 full ones; rotated, each takes about one partial in 22 (11) units: 1.01-1.02x there, the
// same rounds elsewhere (NOTES.md, h20). Causal units cost the same (paired) or are one block
// each: the plain walk, the tree before's code.
template <typename T, bool Causal>
struct UnitWalk {
    static constexpr bool kRotate = !Causal && FLASH_SM90_ROTATE != 1;
    int u, base, slot;
    __device__ __forceinline__ explicit UnitWalk(const TileSchedule<T, Causal>& schedule)
        : u(blockIdx.x), base(0), slot(blockIdx.x) {
        if constexpr (kRotate) u = at(schedule);
    }
    __device__ __forceinline__ void next(const TileSchedule<T, Causal>& schedule) {
        if constexpr (kRotate) {
            base += gridDim.x;
            slot = slot + 1 == (int)gridDim.x ? 0 : slot + 1;
            u = base < schedule.units ? at(schedule) : schedule.units;
        } else {
            u += gridDim.x;
        }
    }
    // The unit at this round's slot, or schedule.units (past the last) where there is none.
    __device__ __forceinline__ int at(const TileSchedule<T, Causal>& schedule) const {
        return slot < schedule.units - base ? base + slot : schedule.units;
    }
};

// Choices per kernel, each shipped where it measured faster (NOTES.md, h12-h14; the switches
// force either).
// kDescriptorSteps: wgmma descriptors as a base per buffer plus compile-time steps, Q's kept
// in uniform registers (qk_wgmma): 0.3-0.5 % at D = 128 and 2-5 % at D = 64 non-causal, 4-5 %
// (with kOwnKeyBound) for three causal consumers, 1-3 % for two causal consumers (without
// kOwnKeyBound, whose code the two-consumer loops grew by); D = 256 was not measured.
// kOwnKeyBound: causal, each consumer warpgroup stops at its own last visible key tile rather
// than the block's (in a 192-row block the first 64 rows see up to 128 keys fewer than the
// last; with two consumers and 128-key tiles the bounds coincide).
// kTreeMax: each row half's maximum over a key tile as four partial maxima combined last, not
// one chain of dependent maxima (the chain held a tenth of the D = 128 loop's stall samples);
// the result is the same, a maximum being exact in any order. Measured 1.02-1.03x for three
// causal consumers and within the same-code spread elsewhere (NOTES.md h14): shipped for three
// causal consumers (h15), for two causal consumers where the tensor core sums the rows (fp16
// D = 64: with the row sums' FADD chain gone, the maxima's chain is the softmax's longest;
// 1.02-1.05x at causal 1024-4096, NOTES.md h24), and since the tensor core sums every D = 64
// kernel's rows (h36), for all of D = 64 (non-causal 1.005-1.015x, NOTES.md h37).
// kSumParts: each row half's sum of P over a key tile (where the registers sum it) as that many
// partial sums added last, not one chain of dependent additions (OnlineSoftmax::exponentiate):
// two at D = 128 (1.02-1.03x one chain; four 0.99x two), four at D = 256 (1.00-1.03x two), one
// at D = 64, where bf16 ran 2-5 % slower with two or four (NOTES.md, h32).
// kLazyRescale: the softmax's reference max moves only when a tile passes it by more than 2^8
// (OnlineSoftmax::fold_lazy), so O's rescale after the wait for P V is rare after the first
// tile: D = 256 (1.02-1.08x from 2048) and the three-consumer D = 64 kernels (1.005-1.015x); the
// two-consumer D = 64 kernels ran 2-5 % slower with it; D = 128 0.99-1.02x (NOTES.md, h35), and
// within the A/A on a clean screen, 0.99x at 16k (h44): its rescale is off the critical path.
// kEpilogueBase: the epilogue's addresses from one base per thread, rebuilt in the epilogue
// (write_output_staged_base), for the three-consumer kernels, whose 160 registers spilled the
// addresses the compiler otherwise keeps live across the tile loop (30-41 LDL a tile); the
// two-consumer kernels (240 registers) spill none and keep the old code (NOTES.md, h26).
// kTmaStore: where O is staged, each consumer warp stores its own 16 rows with TMA stores
// (write_output_tma) instead of every thread copying 16-byte chunks after a barrier over its
// warpgroup: no barrier in the epilogue, the copy off the consumers; 1.00-1.035x at D = 64,
// but 0.96-0.99x at D = 128 without kTwoP (NOTES.md, h27).
// kTwoP: two buffers of P's A fragments, so that P_j is packed as its exponentials come, under
// the P_{j-1} V_{j-1} that reads the other, not after it has landed: with kTmaStore 1.01-1.02x
// the tree before at D = 128; shipped there, and at D = 64 where the registers sum the rows
// (the non-causal two-consumer kernel in bf16 until h36 moved its sums to the tensor core; the
// switch FLASH_SM90_ROW_SUM=1 or 2 brings it back); the causal D = 64 two-consumer kernels ran
// 1-4 % slower with it than without (NOTES.md, h28), the fp16 non-causal one (row sums by the
// tensor core) 1 % slower (h29).
// Two P buffers with the threads' copy-out spilled at D = 128 (11-24 LDL in the loop).
// T::kRowSumMma (kernel_traits.h): the softmax's row sums by the tensor core (h18).
template <typename T, bool Causal>
struct Sm90Choices {
    static constexpr bool kDescriptorSteps =
        FLASH_SM90_DESC_STEPS == 0 ? T::kHeadDim <= 128 : FLASH_SM90_DESC_STEPS == 2;
    static constexpr bool kOwnKeyBound =
        Causal && (FLASH_SM90_OWN_KEY_BOUND == 0 ? T::kConsumerWarpgroups == 3
                                                 : FLASH_SM90_OWN_KEY_BOUND == 2);
    static constexpr bool kTreeMax =
        FLASH_SM90_TREE_MAX == 0 ? T::kHeadDim == 64 : FLASH_SM90_TREE_MAX == 2;
    static constexpr int kSumParts =
        FLASH_SM90_TREE_SUM == 0 ? (T::kHeadDim == 64 ? 1 : T::kHeadDim == 128 ? 2 : 4)
                                 : (FLASH_SM90_TREE_SUM == 1 ? 1 : FLASH_SM90_TREE_SUM == 2 ? 4 : 2);
    static constexpr bool kLazyRescale =
        FLASH_SM90_LAZY_RESCALE == 0
            ? T::kHeadDim == 256 || (T::kHeadDim == 64 && T::kConsumerWarpgroups == 3)
            : FLASH_SM90_LAZY_RESCALE == 2;
    static constexpr bool kEpilogueBase =
        T::kStageO && (FLASH_SM90_EPILOGUE_ADDR == 0 ? T::kConsumerWarpgroups == 3
                                                     : FLASH_SM90_EPILOGUE_ADDR == 2);
    static constexpr bool kTmaStore = T::kStageO && FLASH_SM90_TMA_STORE != 1;
    static constexpr bool kTwoP =
        T::kConsumerWarpgroups == 2 &&
        (FLASH_SM90_P_BUFFERS == 0
             ? T::kHeadDim == 128 || (T::kHeadDim == 64 && !Causal && !T::kRowSumMma)
             : FLASH_SM90_P_BUFFERS == 2 && T::kHeadDim <= 128);
};

// Position in the K/V ring, carried across tiles: stage and the parity of its use.
struct RingPosition {
    int count = 0;
    template <int Stages>
    __device__ __forceinline__ int stage(int j) const { return (count + j) % Stages; }
    template <int Stages>
    __device__ __forceinline__ uint32_t phase(int j) const {
        return uint32_t(((count + j) / Stages) & 1);
    }
};
// The Q buffer of a block's q_loads-th loaded tile (tiles without keys load none), and the
// parity of that buffer's use.
template <typename T>
struct QPosition {
    int stage;
    uint32_t phase;
    __device__ __forceinline__ explicit QPosition(int q_loads)
        : stage(q_loads % T::kQStages), phase(uint32_t((q_loads / T::kQStages) & 1)) {}
};

// One thread streams each tile's Q, then its K_j and V_j into the ring; a buffer is refilled
// once all consumer warps have released it. A fresh barrier counts as having completed the
// phase before its first, so the first pass over each buffer does not wait.
template <typename T, bool Causal>
__device__ __forceinline__ void produce(const FwdKernelParams& p, const Sm90Smem<T>& sm,
                                        const TileSchedule<T, Causal>& schedule,
                                        const CUtensorMap* tma_q, const CUtensorMap* tma_k,
                                        const CUtensorMap* tma_v) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kKVBlockBytes = T::kBlockN * T::kRowBytes;
    constexpr int S = T::kStages;
    // L2 hints (FLASH_SM90_CACHE_HINTS): K and V are read by every block of their head, Q once.
    auto load = [](uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                   int c3, uint64_t policy) {
        if constexpr (FLASH_SM90_CACHE_HINTS != 1)
            sm90::tma_load_4d_hint(dst, map, bar, c0, c1, c2, c3, policy);
        else
            sm90::tma_load_4d(dst, map, bar, c0, c1, c2, c3);
    };
    RingPosition ring;
    int q_loads = 0;
    // Each tile of each of this block's work units, in order (one loop body for both).
    for (UnitWalk<T, Causal> walk(schedule); walk.u < schedule.units; walk.next(schedule))
    for (int k = 0; k < schedule.tiles_in(walk.u); ++k) {
        const int u = walk.u;
        const Tile tile = schedule.tile(p, u, k);
        if (tile.n_blocks == 0) continue;
        const QPosition<T> qpos(q_loads);
        sm90::mbarrier_wait(sm.empty_q(qpos.stage), qpos.phase ^ 1);
        sm90::mbarrier_arrive_expect_tx(sm.full_q(qpos.stage), T::kQBytes);
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
            load(sm.q(qpos.stage) + cb * kQBlockBytes, tma_q, sm.full_q(qpos.stage), cb * 64,
                 tile.m_block * T::kBlockM, tile.head, tile.batch, sm90::kEvictFirst);
        ++q_loads;
        // Grouped-query attention: the tile's k/v head (flash_api.h).
        const int kv_head = p.kv_heads.kv_head(tile.head);
        // Rows j * kBlockN .. of K or V into `buffer` once `empty` allows, landing on `full`.
        auto load_kv = [&](uint32_t buffer, const CUtensorMap* map, uint32_t full, uint32_t empty,
                           uint32_t phase, int j) {
            sm90::mbarrier_wait(empty, phase ^ 1);
            sm90::mbarrier_arrive_expect_tx(full, T::kTileBytes);
#pragma unroll
            for (int cb = 0; cb < T::kColBlocks; ++cb)
                load(buffer + cb * kKVBlockBytes, map, full, cb * 64, j * T::kBlockN, kv_head,
                     tile.batch, sm90::kEvictLast);
        };
        for (int j = 0; j < tile.n_blocks; ++j) {
            const int stage = ring.stage<S>(j);
            const uint32_t phase = ring.phase<S>(j);
            load_kv(sm.k(stage), tma_k, sm.full_k(stage), sm.empty_k(stage), phase, j);
            load_kv(sm.v(stage), tma_v, sm.full_v(stage), sm.empty_v(stage), phase, j);
        }
        ring.count += tile.n_blocks;
    }
}

// Descriptor low words (sm90_utils.h) of this consumer warpgroup's Q rows (in Q buffer 0) and
// of the first K and V buffers; a ring stage or Q buffer is a step of kTileBytes or kQBytes
// from them.
struct Sm90Descriptors {
    uint32_t q, k, v;
};
template <typename T>
__device__ __forceinline__ Sm90Descriptors descriptors(const Sm90Smem<T>& sm, int consumer_wg) {
    // MN-major V: the next 64 columns of the head dim are the next column block (leading offset).
    // kRowSumMma: the leading offset leads from V's 64 columns to the ones instead (pv_wgmma).
    constexpr uint32_t kColBlockBytes = T::kBlockN * T::kRowBytes;
    const uint32_t v_leading = T::kRowSumMma ? sm.ones() - sm.v(0) : kColBlockBytes;
    return {sm90::descriptor_lo(sm.q(0) + consumer_wg * 64 * T::kRowBytes, 0),
            sm90::descriptor_lo(sm.k(0), 0), sm90::descriptor_lo(sm.v(0), v_leading)};
}
// S = Q K_j^T for this consumer warpgroup's 64 rows of Q buffer q_stage (scale_d = 0 on the
// first k-step).
template <typename T, bool Steps>
__device__ __forceinline__ void qk_wgmma(float (&s)[T::kNTiles][4], const Sm90Smem<T>& sm,
                                         int q_stage, int stage, int consumer_wg,
                                         const Sm90Descriptors& desc) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kKVBlockBytes = T::kBlockN * T::kRowBytes;
    const uint32_t q_rows = sm.q(q_stage) + consumer_wg * 64 * T::kRowBytes;
    const uint32_t q_lo = desc.q + q_stage * (T::kQBytes >> 4);
    const uint32_t k_lo = desc.k + stage * (T::kTileBytes >> 4);
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
        // 16 columns = 32 bytes per k-step, four k-steps per 128-byte column block.
        const int cb = ks / 4, in_row = (ks % 4) * 32;
        if constexpr (Steps) {
            const uint64_t desc_q = sm90::descriptor(q_lo + ((cb * kQBlockBytes + in_row) >> 4));
            const uint64_t desc_k = sm90::descriptor(k_lo + ((cb * kKVBlockBytes + in_row) >> 4));
            sm90::wgmma_ss<typename T::Elem>(s, desc_q, desc_k, ks > 0);
        } else {
            const uint64_t desc_q = sm90::smem_descriptor(q_rows + cb * kQBlockBytes + in_row, 0);
            const uint64_t desc_k =
                sm90::smem_descriptor(sm.k(stage) + cb * kKVBlockBytes + in_row, 0);
            sm90::wgmma_ss<typename T::Elem>(s, desc_q, desc_k, ks > 0);
        }
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

// O += P V_j, and with T::kRowSumMma each row's sum of P into l_acc. P is packed before the
// wgmma fence: registers written between the fence and a wgmma that reads them make ptxas
// insert a fence before every wgmma (warning C7519).
template <typename T, bool Steps>
__device__ __forceinline__ void pv_wgmma(float (&o_acc)[T::kDTiles][4], float (&l_acc)[1][4],
                                         const uint32_t (&pa)[T::kBlockN / 16][4],
                                         const Sm90Smem<T>& sm, int stage,
                                         const Sm90Descriptors& desc) {
    using Elem = typename T::Elem;
    // MN-major V: 16 keys = 16 rows of 128 bytes per k-step; the next 64 columns of the head
    // dim are the next column block (the descriptor's leading offset). kRowSumMma (D = 64): the
    // 8 columns past V's 64 are read at the leading offset, which points at the ones from every
    // stage and k-step, so a step of `bytes` moves the start on and the offset back as much.
    constexpr uint32_t kColBlockBytes = T::kBlockN * T::kRowBytes;
    constexpr auto step = [](uint32_t bytes) {
        return T::kRowSumMma ? (bytes >> 4) - ((bytes >> 4) << 16) : bytes >> 4;
    };
    const uint32_t v_lo = desc.v + stage * step(T::kTileBytes);
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
        const uint32_t v_addr = sm.v(stage) + kk * 16 * T::kRowBytes;
        const uint64_t desc_v =
            Steps ? sm90::descriptor(v_lo + step(kk * 16 * T::kRowBytes))
                  : sm90::smem_descriptor(
                        v_addr, T::kRowSumMma ? sm.ones() - v_addr : kColBlockBytes);
        if constexpr (T::kRowSumMma)
            sm90::wgmma_rs<Elem>(o_acc, l_acc, pa[kk], desc_v, 1);
        else
            sm90::wgmma_rs<Elem>(o_acc, pa[kk], desc_v, 1);
    }
}

// The bits of every value of x or-ed together: of probabilities (>= 0), a float >= 0 or NaN;
// of probabilities packed two to a word (16-bit halves >= 0), the same.
__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t bits_of(uint32_t x) { return x; }
template <typename V, int N>
__device__ __forceinline__ float or_bits(const V (&x)[N][4]) {
    uint32_t bits = 0;
#pragma unroll
    for (int t = 0; t < N; ++t)
#pragma unroll
        for (int c = 0; c < 4; ++c) bits |= bits_of(x[t][c]);
    return __uint_as_float(bits);
}

// The staging half of the epilogues below: this warp's 16 rows of O, normalized by their sums
// of P (the softmax's, or with T::kRowSumMma the tensor core's in l_acc), packed into the O
// buffer `sq` at addresses from one base per thread (write_output_staged_base says why), and
// their lse written.
template <typename T>
__device__ __forceinline__ void stage_rows_base(float (&o_acc)[T::kDTiles][4],
                                                const float (&l_acc)[1][4],
                                                const OnlineSoftmax<1>& softmax, uint8_t* sq,
                                                float* lse, int m0, int seqlen_q,
                                                int consumer_warp, int lane) {
    using Elem = typename T::Elem;
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes;
    const int row = consumer_warp * 16 + lane / 4;
    const int stage_base = row * T::kRowBytes + ((lane / 4) << 4) + (lane % 4) * 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float sum = T::kRowSumMma ? l_acc[0][2 * h] : softmax.total(0, h);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int r = row + h * 8;
        if (lane % 4 == 0 && m0 + r < seqlen_q) lse[m0 + r] = softmax.lse(0, h, sum);
#pragma unroll
        for (int t = 0; t < T::kDTiles; ++t) {
            const int offset =
                (stage_base ^ ((t % 8) << 4)) + (t / 8) * kQBlockBytes + h * 8 * T::kRowBytes;
            *reinterpret_cast<uint32_t*>(sq + offset) =
                Mma<Elem>::pack(o_acc[t][2 * h] * inv, o_acc[t][2 * h + 1] * inv);
        }
    }
}

// write_output_sm90's staged path with its addresses from a base per thread. Written as there
// (a row and chunk per store), the 16 staging addresses and the copy-out's rows and read offsets
// depend on the thread alone: the compiler computes them once before the tile loop and keeps
// them live across it, and at 160 registers (three consumers) ptxas spills them, 30-41 LDL a
// tile at D = 64 (NOTES.md, h26). Here:
// - staging: rows r = warp * 16 + lane / 4 + 8h, so r % 8 = lane / 4 in both halves, and the
//   swizzled chunk (t ^ r % 8) is the base's bits 4-6 (lane / 4; 128-byte rows) XOR t: one XOR
//   and a constant per store, from one base the compiler may keep (one register);
// - copy-out: step i's row is r0 + i * kRowsPerStep, a multiple of 8 rows on, so the same
//   swizzle: a constant step in shared memory and one of o_row_stride * kRowsPerStep in O, from
//   the thread's index passed through an empty asm, which nothing before the loop can compute.
//   (The lane through it at the top removed every spill too, but moved bf16's key loop: its
//   P V wgmmas lost their own uniform registers, 588 -> 598 instructions.)
template <typename T>
__device__ __forceinline__ void write_output_staged_base(float (&o_acc)[T::kDTiles][4],
                                                         const float (&l_acc)[1][4],
                                                         const OnlineSoftmax<1>& softmax,
                                                         const Sm90Smem<T>& sm,
                                                         typename T::Elem* o, int64_t o_row_stride,
                                                         float* lse, int m0, int seqlen_q,
                                                         int consumer_warp, int lane) {
    using Elem = typename T::Elem;
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kChunks = T::kHeadDim / 8;
    constexpr int kRowsPerStep = 128 / kChunks;
    static_assert(T::kRowBytes == 128 && kRowsPerStep % 8 == 0, "the swizzle repeats every 8 rows");
    uint8_t* sq = sm.o_generic();
    const int consumer_wg = consumer_warp / 4, wg_tid = (consumer_warp % 4) * 32 + lane;
    // Every warp of the warpgroup is done reading the previous tile's staged rows.
    sm90::named_barrier_sync(1 + consumer_wg, 128);
    stage_rows_base<T>(o_acc, l_acc, softmax, sq, lse, m0, seqlen_q, consumer_warp, lane);
    sm90::named_barrier_sync(1 + consumer_wg, 128);
    int thread = wg_tid;
    asm volatile("" : "+r"(thread));  // opaque: rebuilt here every tile, not kept across the loop
    const int r0 = consumer_wg * 64 + thread / kChunks, c = thread % kChunks;
    const uint8_t* src = sq + (c / 8) * kQBlockBytes + Sm90Smem<T>::swizzled_offset(r0, c % 8);
    Elem* dst = o + (int64_t)(m0 + r0) * o_row_stride + c * 8;
    const int64_t dst_step = o_row_stride * kRowsPerStep;
#pragma unroll
    for (int i = 0; i < 64 / kRowsPerStep; ++i) {
        if (m0 + r0 + i * kRowsPerStep < seqlen_q)
            *reinterpret_cast<uint4*>(dst + i * dst_step) =
                *reinterpret_cast<const uint4*>(src + i * kRowsPerStep * T::kRowBytes);
    }
}

// write_output_sm90's staged path with the copy to global memory left to the TMA unit: each
// consumer warp stages its own 16 rows (at the staging addresses of write_output_staged_base:
// one base per thread XOR a constant), and its lane 0 stores them with one TMA store per 64
// columns (tma_o: boxes of 64 columns x 16 rows; rows past seqlen_q are not written). A warp
// waits only for its own previous store to have read its rows: no barrier over the warpgroup,
// and none of the 16-byte loads, stores and address arithmetic of the threads' copy
// (NOTES.md, h27). consume() waits for the last store before the block exits.
template <typename T>
__device__ __forceinline__ void write_output_tma(float (&o_acc)[T::kDTiles][4],
                                                 const float (&l_acc)[1][4],
                                                 const OnlineSoftmax<1>& softmax,
                                                 const Sm90Smem<T>& sm, const CUtensorMap* tma_o,
                                                 const Tile& tile, float* lse, int m0,
                                                 int seqlen_q, int consumer_warp, int lane) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kWarpRowsBytes = 16 * T::kRowBytes;
    static_assert(T::kRowBytes == 128 && kWarpRowsBytes % 1024 == 0,
                  "a warp's rows are whole 128-byte swizzle atoms");
    uint8_t* sq = sm.o_generic();
    // This warp's previous tile's store has read its staged rows.
    if (lane == 0) sm90::bulk_wait_group_read<0>();
    __syncwarp();
    stage_rows_base<T>(o_acc, l_acc, softmax, sq, lse, m0, seqlen_q, consumer_warp, lane);
    // Each thread's stores before the TMA unit (the async proxy) reads them, then the warp's.
    sm90::fence_proxy_async();
    __syncwarp();
    if (lane == 0) {
        const uint32_t src = sm.o() + consumer_warp * kWarpRowsBytes;
#pragma unroll
        for (int cb = 0; cb < T::kColBlocks; ++cb)
            sm90::tma_store_4d(tma_o, src + cb * kQBlockBytes, cb * 64, m0 + consumer_warp * 16,
                               tile.head, tile.batch);
        sm90::bulk_commit_group();
    }
}

// Normalizes O by its rows' sums of P (the softmax's, or with T::kRowSumMma the tensor core's
// in l_acc), writes lse, and stages O in this warpgroup's own rows of the O buffer (the other
// warpgroup never touches them) for 16-byte coalesced global stores; without an O buffer
// (traits: kStageO), each thread stores its own fragments, 4 bytes each.
// BaseAddresses (Sm90Choices::kEpilogueBase): the staging buffer's and O's addresses from one
// base each, rebuilt here (write_output_staged_base says why).
template <typename T, bool BaseAddresses = false>
__device__ __forceinline__ void write_output_sm90(float (&o_acc)[T::kDTiles][4],
                                                  const float (&l_acc)[1][4],
                                                  const OnlineSoftmax<1>& softmax,
                                                  const Sm90Smem<T>& sm, typename T::Elem* o,
                                                  int64_t o_row_stride, float* lse, int m0,
                                                  int seqlen_q, int consumer_warp, int lane) {
    using Elem = typename T::Elem;
    if constexpr (!T::kStageO) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float sum = T::kRowSumMma ? l_acc[0][2 * h] : softmax.total(0, h);
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
            const int r = consumer_warp * 16 + lane / 4 + h * 8;
            if (m0 + r >= seqlen_q) continue;
            if (lane % 4 == 0) lse[m0 + r] = softmax.lse(0, h, sum);
            Elem* row = o + (int64_t)(m0 + r) * o_row_stride + (lane % 4) * 2;
#pragma unroll
            for (int t = 0; t < T::kDTiles; ++t)
                *reinterpret_cast<uint32_t*>(row + t * 8) =
                    Mma<Elem>::pack(o_acc[t][2 * h] * inv, o_acc[t][2 * h + 1] * inv);
        }
        return;
    }
    if constexpr (BaseAddresses) {
        write_output_staged_base<T>(o_acc, l_acc, softmax, sm, o, o_row_stride, lse, m0,
                                    seqlen_q, consumer_warp, lane);
        return;
    }
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes;
    uint8_t* sq = sm.o_generic();
    const int consumer_wg = consumer_warp / 4, wg_tid = (consumer_warp % 4) * 32 + lane;
    // Every warp of the warpgroup is done reading the previous tile's staged rows.
    sm90::named_barrier_sync(1 + consumer_wg, 128);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float sum = T::kRowSumMma ? l_acc[0][2 * h] : softmax.total(0, h);
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

// Turn-taking of the consumer warpgroups over MMA issue ("pingpong"): a warpgroup issues its
// MMAs when the one before it (round robin) has issued its own, so that one's softmax runs
// under the others' MMAs (NOTES.md, h2). Hardware barriers 1 + Consumers .. 2 * Consumers
// (1 .. Consumers are per warpgroup), each shared by its warpgroup (sync) and the one before
// (arrive). Every warpgroup takes the same number of turns; the last passes one turn more
// than warpgroup 0 takes (start() lets warpgroup 0 go first), which finish() absorbs.
template <int Consumers>
struct Pingpong {
    static constexpr int kFirstBarrier = 1 + Consumers;
    int consumer_wg;
    // One consumer: no turns.
    static constexpr bool kTurns = Consumers > 1;
    __device__ __forceinline__ void start() const {
        if (kTurns && consumer_wg == Consumers - 1) sm90::named_barrier_arrive(kFirstBarrier, 256);
    }
    __device__ __forceinline__ void take_turn() const {
        if (kTurns) sm90::named_barrier_sync(kFirstBarrier + consumer_wg, 256);
    }
    __device__ __forceinline__ void pass_turn() const {
        if (kTurns) sm90::named_barrier_arrive(kFirstBarrier + (consumer_wg + 1) % Consumers, 256);
    }
    __device__ __forceinline__ void finish() const {
        if (kTurns && consumer_wg == 0) sm90::named_barrier_sync(kFirstBarrier, 256);
    }
};

// A consumer warpgroup whose 64 rows all lie past the sequence end (in the last query block of
// a 192-row block), or, causal with kOwnKeyBound, see no key, takes its turns and releases
// every buffer as consume_tile would, without the math. It waits for each buffer to fill
// before releasing it: a refilled buffer's earlier use has been released by every warp, so the
// arrival lands in this use's phase.
template <typename T>
__device__ __forceinline__ void pass_tile(const Sm90Smem<T>& sm, const Tile& tile,
                                          const RingPosition& ring, const QPosition<T>& q,
                                          const Pingpong<T::kConsumerWarpgroups>& turns,
                                          int lane) {
    constexpr int S = T::kStages;
    const int n_blocks = tile.n_blocks;
    if (n_blocks == 0) return;
    sm90::mbarrier_wait(sm.full_q(q.stage), q.phase);
    // n_blocks + 1 turns, as consume_tile takes: S_0, then S_j with P_{j-1} V_{j-1}, then the
    // last P V.
    for (int j = 0; j <= n_blocks; ++j) {
        if (j < n_blocks) sm90::mbarrier_wait(sm.full_k(ring.stage<S>(j)), ring.phase<S>(j));
        if (j > 0) sm90::mbarrier_wait(sm.full_v(ring.stage<S>(j - 1)), ring.phase<S>(j - 1));
        turns.take_turn();
        turns.pass_turn();
        if (lane == 0) {
            if (j < n_blocks) sm90::mbarrier_arrive(sm.empty_k(ring.stage<S>(j)));
            if (j == n_blocks - 1) sm90::mbarrier_arrive(sm.empty_q(q.stage));
            if (j > 0) sm90::mbarrier_arrive(sm.empty_v(ring.stage<S>(j - 1)));
        }
    }
}

// Key tiles that some row of this consumer warpgroup's 64 sees: the tile's, or, with
// kOwnKeyBound, those up to its own last row's diagonal.
template <typename T, bool Causal>
__device__ __forceinline__ int own_key_tiles(const FlashFwdParams& p, const Tile& tile,
                                             int consumer_wg) {
    if constexpr (!Sm90Choices<T, Causal>::kOwnKeyBound) {
        return tile.n_blocks;
    } else {
        const int n_end = min(p.seqlen_k, tile.m_block * T::kBlockM + (consumer_wg + 1) * 64 +
                                              p.seqlen_k - p.seqlen_q);
        return min(tile.n_blocks, n_end > 0 ? (n_end + T::kBlockN - 1) / T::kBlockN : 0);
    }
}

// What a released K or V buffer becomes: with a producer, an arrival on its empty barrier from
// each consumer warp (consume_tile); solo, its next load, issued by thread 0 (SoloLoads).
struct ProducerRefill {
    __device__ __forceinline__ void k_done(int) const {}
    __device__ __forceinline__ void v_done(int) const {}
};

// One consumer warpgroup, one tile: its 64 query rows against every K/V tile of the tile's
// keys, from ring position `ring`, then the output.
template <typename T, bool Causal, typename Refill = ProducerRefill>
__device__ __forceinline__ void consume_tile(const FlashFwdParams& p, const Sm90Smem<T>& sm,
                                             const Tile& tile, const RingPosition& ring,
                                             const QPosition<T>& q,
                                             const Pingpong<T::kConsumerWarpgroups>& turns,
                                             const CUtensorMap* tma_o, int consumer_warp,
                                             int lane, const Refill& refill = Refill()) {
    using Elem = typename T::Elem;
    using Choices = Sm90Choices<T, Causal>;
    constexpr int S = T::kStages;
    const int consumer_wg = consumer_warp / 4;
    const int n_blocks = own_key_tiles<T, Causal>(p, tile, consumer_wg);
    const int m0 = tile.m_block * T::kBlockM, causal_offset = p.seqlen_k - p.seqlen_q;
    const float scale_log2 = score_scale_log2(p.scale);
    // The warpgroup index through a shuffle from lane 0: ptxas then knows it is the same in every
    // lane and keeps Q's descriptors in uniform registers (no R2UR per wgmma, no registers).
    const Sm90Descriptors desc = descriptors(
        sm, Choices::kDescriptorSteps ? __shfl_sync(0xffffffff, consumer_wg, 0) : consumer_wg);
    // The tile's Q buffer, known warp-uniform in the same way (Q's descriptors).
    const int q_stage = T::kQStages == 1         ? 0
                        : Choices::kDescriptorSteps ? __shfl_sync(0xffffffff, q.stage, 0)
                                                    : q.stage;
    // l_acc: each row's sum of P from the tensor core (kRowSumMma; its 8 columns all hold it).
    float o_acc[1][T::kDTiles][4], l_acc[1][1][4];
#pragma unroll
    for (int t = 0; t < T::kDTiles; ++t)
#pragma unroll
        for (int c = 0; c < 4; ++c) o_acc[0][t][c] = 0.f;
#pragma unroll
    for (int c = 0; c < 4; ++c) l_acc[0][0][c] = 0.f;
    OnlineSoftmax<1> softmax;

    // Masks tile j's raw scores where needed and folds them into the softmax state.
    auto score_tile = [&](float (&s)[1][T::kNTiles][4], int j, float (&correction)[1][2]) {
        const int n0 = j * T::kBlockN;
        const bool tail = n0 + T::kBlockN > p.seqlen_k;
        const bool diagonal = Causal && n0 + T::kBlockN - 1 > m0 + causal_offset;
        if (tail || diagonal)
            mask_scores<T, Causal>(s, m0, n0, p.seqlen_k, causal_offset, consumer_warp, lane);
        if constexpr (Choices::kLazyRescale)
            return softmax.fold_lazy<Choices::kTreeMax, Choices::kSumParts>(s, correction,
                                                                            scale_log2);
        else
            return softmax.fold<Choices::kTreeMax, Choices::kSumParts>(s, correction, scale_log2);
    };
    // K_j is free once S_j landed; after the tile's last S, so is Q.
    auto release_k = [&](int j) {
        if constexpr (T::kSolo) {
            refill.k_done(j);
        } else if (lane == 0) {
            sm90::mbarrier_arrive(sm.empty_k(ring.stage<S>(j)));
            if (j == n_blocks - 1) sm90::mbarrier_arrive(sm.empty_q(q.stage));
        }
    };
    auto release_v = [&](int j) {
        if constexpr (T::kSolo)
            refill.v_done(j);
        else if (lane == 0)
            sm90::mbarrier_arrive(sm.empty_v(ring.stage<S>(j)));
    };

    // S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued together; the softmax of tile j + 1
    // runs while P_j V_j is in flight, and O is rescaled once it has landed (NOTES.md, h2).
    if (n_blocks > 0) {
        sm90::mbarrier_wait(sm.full_q(q.stage), q.phase);
        if (p.scale < 0.f) {
            // Fold the sign into this warpgroup's Q rows (softmax.h), then hand them to wgmma.
            constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kRowsBytes = 64 * T::kRowBytes;
            const int wg_tid = (consumer_warp % 4) * 32 + lane;
#pragma unroll
            for (int cb = 0; cb < T::kColBlocks; ++cb)
                negate_tile<kRowsBytes / 2, 128>(
                    reinterpret_cast<Elem*>(sm.q_generic(q.stage) + cb * kQBlockBytes +
                                            consumer_wg * kRowsBytes),
                    wg_tid);
            sm90::fence_proxy_async();
            sm90::named_barrier_sync(1 + consumer_wg, 128);
        }
        float s[1][T::kNTiles][4], correction[1][2];
        // P as P V's A fragments: one buffer, or two (Choices::kTwoP) taken in turns.
        constexpr int kPBuffers = Choices::kTwoP ? 2 : 1;
        uint32_t pa[kPBuffers][T::kBlockN / 16][4];
        sm90::mbarrier_wait(sm.full_k(ring.stage<S>(0)), ring.phase<S>(0));
        turns.take_turn();
        sm90::wgmma_fence();
        qk_wgmma<T, Choices::kDescriptorSteps>(s[0], sm, q_stage, ring.stage<S>(0), consumer_wg,
                                               desc);
        sm90::wgmma_commit();
        turns.pass_turn();
        sm90::wgmma_wait<0>();
        sm90::fence_registers(s[0]);
        release_k(0);
        score_tile(s, 0, correction);  // o_acc is still zero: nothing to rescale
        pack_probabilities<T>(pa[0], s[0]);
        // Key tile j: S_j with P_{j-1} V_{j-1} (P_{j-1} in p_prev), the softmax of S_j under
        // P V, P_j into p_next. One buffer (p_prev is p_next): P_j is packed once P V has
        // landed, after the softmax. Two: P_j is packed as the exponentials come, into the
        // buffer the MMA in flight does not read (NOTES.md, h28).
        auto key_tile = [&](int j, const uint32_t(&p_prev)[T::kBlockN / 16][4],
                            uint32_t(&p_next)[T::kBlockN / 16][4]) {
            const int stage = ring.stage<S>(j), prev = ring.stage<S>(j - 1);
            sm90::mbarrier_wait(sm.full_k(stage), ring.phase<S>(j));
            sm90::mbarrier_wait(sm.full_v(prev), ring.phase<S>(j - 1));
            turns.take_turn();
            sm90::wgmma_fence();
            qk_wgmma<T, Choices::kDescriptorSteps>(s[0], sm, q_stage, stage, consumer_wg, desc);
            sm90::wgmma_commit();
            pv_wgmma<T, Choices::kDescriptorSteps>(o_acc[0], l_acc[0], p_prev, sm, prev, desc);
            sm90::wgmma_commit();
            turns.pass_turn();
            sm90::wgmma_wait<1>();  // S_j landed; P_{j-1} V_{j-1} may still run
            sm90::fence_registers(s[0]);
            release_k(j);
            const bool moved = score_tile(s, j, correction);
            if constexpr (Choices::kTwoP) pack_probabilities<T>(p_next, s[0]);
            // Without this, ptxas hoists the wait below to just after wait<1>: the softmax
            // then ran after P_{j-1} V_{j-1} had landed, not under it (NOTES.md, h10). The
            // pin depends on every exponential: through the row sums, or, where the tensor
            // core sums the rows, through the probabilities' bits; with two P buffers also
            // through the packed P's bits, so that ptxas packs them before the wait too (it
            // otherwise sinks the packs to the next tile's P V).
            const float pinned = T::kRowSumMma
                                     ? or_bits(s[0])
                                     : softmax.row_sum[0][0] + softmax.row_sum[0][1];
            sm90::order_wait_after(
                Choices::kTwoP ? __uint_as_float(__float_as_uint(or_bits(p_next)) |
                                                 __float_as_uint(pinned))
                               : pinned,
                sm.scratch());
            sm90::wgmma_wait<0>();
            sm90::fence_registers(o_acc[0]);
            if constexpr (T::kRowSumMma) sm90::fence_registers(l_acc[0]);
            release_v(j - 1);
            if (moved) {
                OnlineSoftmax<1>::rescale_output(o_acc, correction);
                if constexpr (T::kRowSumMma) OnlineSoftmax<1>::rescale_output(l_acc, correction);
            }
            if constexpr (!Choices::kTwoP) pack_probabilities<T>(p_next, s[0]);
        };
        // The tile's last P V, from buffer `p`.
        auto last_pv = [&](const uint32_t(&p)[T::kBlockN / 16][4]) {
            const int last = ring.stage<S>(n_blocks - 1);
            sm90::mbarrier_wait(sm.full_v(last), ring.phase<S>(n_blocks - 1));
            turns.take_turn();
            sm90::wgmma_fence();
            pv_wgmma<T, Choices::kDescriptorSteps>(o_acc[0], l_acc[0], p, sm, last, desc);
            sm90::wgmma_commit();
            turns.pass_turn();
            sm90::wgmma_wait<0>();
            sm90::fence_registers(o_acc[0]);
            if constexpr (T::kRowSumMma) sm90::fence_registers(l_acc[0]);
            release_v(n_blocks - 1);
        };
        if constexpr (Choices::kTwoP) {
            // Two key tiles an iteration, so that each buffer is a fixed set of registers.
            int j = 1;
            for (; j + 1 < n_blocks; j += 2) {
                key_tile(j, pa[0], pa[kPBuffers - 1]);
                key_tile(j + 1, pa[kPBuffers - 1], pa[0]);
            }
            if (j < n_blocks) {
                key_tile(j, pa[0], pa[kPBuffers - 1]);
                last_pv(pa[kPBuffers - 1]);
            } else {
                last_pv(pa[0]);
            }
        } else {
            for (int j = 1; j < n_blocks; ++j) key_tile(j, pa[0], pa[0]);
            last_pv(pa[0]);
        }
    }
    if constexpr (Choices::kOwnKeyBound) {
        // The tile's key tiles past this warpgroup's last visible key: their turns (the math
        // took n_blocks + 1, the tile has tile.n_blocks + 1) and releases, without math, each
        // buffer waited for first (pass_tile says why). No visible key at all: the whole tile
        // passed, and the rows written as zeros below.
        if (n_blocks == 0) {
            pass_tile<T>(sm, tile, ring, q, turns, lane);
        } else {
            for (int j = n_blocks; j < tile.n_blocks; ++j) {
                sm90::mbarrier_wait(sm.full_k(ring.stage<S>(j)), ring.phase<S>(j));
                sm90::mbarrier_wait(sm.full_v(ring.stage<S>(j)), ring.phase<S>(j));
                turns.take_turn();
                turns.pass_turn();
                if (lane == 0) {
                    sm90::mbarrier_arrive(sm.empty_k(ring.stage<S>(j)));
                    sm90::mbarrier_arrive(sm.empty_v(ring.stage<S>(j)));
                }
            }
        }
    }

    float* lse = p.lse + ((int64_t)tile.batch * p.heads + tile.head) * p.seqlen_q;
    if constexpr (Choices::kTmaStore) {
        write_output_tma<T>(o_acc[0], l_acc[0], softmax, sm, tma_o, tile, lse, m0, p.seqlen_q,
                            consumer_warp, lane);
    } else {
        Elem* o =
            static_cast<Elem*>(p.o) + tile.batch * p.o_batch_stride + tile.head * p.o_head_stride;
        write_output_sm90<T, Choices::kEpilogueBase>(o_acc[0], l_acc[0], softmax, sm, o,
                                                     p.o_row_stride, lse, m0, p.seqlen_q,
                                                     consumer_warp, lane);
    }
}

template <typename T, bool Causal>
__device__ __forceinline__ void consume(const FlashFwdParams& p, const Sm90Smem<T>& sm,
                                        const TileSchedule<T, Causal>& schedule,
                                        const CUtensorMap* tma_o, int consumer_warp, int lane) {
    const Pingpong<T::kConsumerWarpgroups> turns{consumer_warp / 4};
    turns.start();
    RingPosition ring;
    int q_loads = 0;
    // Each tile of each of this block's work units, in order (one loop body for both).
    for (UnitWalk<T, Causal> walk(schedule); walk.u < schedule.units; walk.next(schedule))
    for (int k = 0; k < schedule.tiles_in(walk.u); ++k) {
        const int u = walk.u;
        const Tile tile = schedule.tile(p, u, k);
        // Only a block of three consumers can have a warpgroup with no row before seqlen_q.
        const bool idle = T::kConsumerWarpgroups > 2 &&
                          tile.m_block * T::kBlockM + turns.consumer_wg * 64 >= p.seqlen_q;
        const QPosition<T> q(q_loads);
        if (idle)
            pass_tile<T>(sm, tile, ring, q, turns, lane);
        else
            consume_tile<T, Causal>(p, sm, tile, ring, q, turns, tma_o, consumer_warp, lane);
        ring.count += tile.n_blocks;
        q_loads += tile.n_blocks > 0;
    }
    turns.finish();
    // The block's shared memory must outlive the reads of this warp's last TMA store.
    if constexpr (Sm90Choices<T, Causal>::kTmaStore) {
        if (lane == 0) sm90::bulk_wait_group<0>();
    }
}

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

// One warpgroup, one tile, no producer warpgroup (Sm90Traits::kSolo): three blocks share an SM
// and the hardware overlaps one's tile boundaries with the others' key loops, as cuDNN's
// 64 x 128 one-warpgroup kernels do (NOTES.md, h43).
template <typename T, bool Causal>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    flash_fwd_sm90_solo_kernel(const FwdKernelParams p, const __grid_constant__ CUtensorMap tma_q,
                               const __grid_constant__ CUtensorMap tma_k,
                               const __grid_constant__ CUtensorMap tma_v,
                               const __grid_constant__ CUtensorMap tma_o) {
    static_assert(T::kSolo && T::kThreads == 128 && !T::kRowSumMma);
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[Sm90Smem<T>::kBarriers + 1];
    Sm90Smem<T> sm;
    sm.place(smem_raw, bars);
    const int tid = threadIdx.x;
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
    consume_tile<T, Causal>(p, sm, tile, RingPosition{}, QPosition<T>(0), turns, &tma_o, tid / 32,
                            tid % 32, loads);
    if (tid % 32 == 0) sm90::bulk_wait_group<0>();
}

template <typename T, bool Causal>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_fwd_sm90_kernel(const FwdKernelParams p, const __grid_constant__ CUtensorMap tma_q,
                          const __grid_constant__ CUtensorMap tma_k,
                          const __grid_constant__ CUtensorMap tma_v,
                          const __grid_constant__ CUtensorMap tma_o, const bool paired_causal) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t bars[Sm90Smem<T>::kBarriers + 1];
    Sm90Smem<T> sm;
    sm.place(smem_raw, bars);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const TileSchedule<T, Causal> schedule(p.seqlen_q, p.heads, p.batch, paired_causal);

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
    if constexpr (T::kRowSumMma) {
        // The ones the tensor core sums the rows of P against (1.0 is 0x3C00 in fp16, 0x3F80 in
        // bf16; two a word), written before any wgmma reads them (the async proxy's fence, then
        // the block's barrier).
        constexpr uint32_t pair = __is_same(typename T::Elem, __half) ? 0x3C003C00u : 0x3F803F80u;
        for (int i = tid; i < T::kOnesBytes / 4; i += T::kThreads)
            reinterpret_cast<uint32_t*>(sm.ones_generic())[i] = pair;
        sm90::fence_proxy_async();
    }
    __syncthreads();

    if (warp < 4) {
        sm90::regs_release<T::kProducerRegs>();
        if (warp == 0 && lane == 0) produce<T, Causal>(p, sm, schedule, &tma_q, &tma_k, &tma_v);
    } else {
        sm90::regs_claim<T::kConsumerRegs>();
        consume<T, Causal>(p, sm, schedule, &tma_o, warp - 4, lane);
    }
}

}  // namespace flash
