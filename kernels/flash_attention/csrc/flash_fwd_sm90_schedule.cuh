// The Hopper kernel's schedule (flash_fwd_kernel_sm90.cuh has the overview): the block's shared
// memory and barriers, which tiles a block takes in which order (TileSchedule, UnitWalk), the
// positions in the K/V ring and the Q buffers, and the producer that streams them with TMA.
#pragma once

#include <stdint.h>
#include "flash_api.h"
#include "kernel_params.h"
#include "kernel_traits.h"
#include "flash_fwd_sm90_choices.cuh"
#include "flash_fwd_sm90_split.cuh"
#include "sm90_utils.h"
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
        // Without T::kAlignPad the buffers fit only where `raw` starts aligned.
        if constexpr (T::kAlignPad == 0) {
            if (address % 1024 != 0) __trap();
        }
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
    // The consumer warps' O staging (T::kStageOHalves), after the ones, 1024-aligned.
    __device__ __forceinline__ uint32_t o_halves() const { return ones() + T::kOnesBytes; }
    __device__ __forceinline__ uint8_t* o_halves_generic() const {
        return ones_generic() + T::kOnesBytes;
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
// A tile's key tiles are n_begin .. n_begin + n_blocks - 1: from 0, but for a piece of a split
// last round (flash_fwd_sm90_split.cuh).
struct Tile {
    int m_block, head, batch, n_blocks, n_begin;
};
template <typename T, bool Causal>
struct TileSchedule {
    bool paired;
    int m_blocks, units_per_head, units;

    // The walk stops at `walk_units` where the grid's last round is split (TailSplit).
    __host__ __device__ __forceinline__ TileSchedule(int seqlen_q, int heads, int batch,
                                                     bool paired_causal,
                                                     int walk_units = INT32_MAX) {
        paired = Causal && paired_causal;
        m_blocks = (seqlen_q + T::kBlockM - 1) / T::kBlockM;
        units_per_head = paired ? (m_blocks + 1) / 2 : m_blocks;
        units = (int)((int64_t)units_per_head * heads * batch);  // the launcher checks the range
        if (walk_units < units) units = walk_units;
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
        tile.n_begin = 0;
        return tile;
    }
};

// A block's walk over its work units, in rounds of G (the grid's blocks): in round r block b
// takes unit r * G + b, or, rotated, r * G + (b + r) % G (the same units per round, each
// block's place among them moving on by one a round). Rotated for the non-causal launches: a
// unit's cost is its rows' share of a block where a head's last query block is partial (three
// consumers: 2048 rows are 10 2/3 blocks of 192, 4096 21 1/3), and with G a multiple of the
// query blocks per head (132 = 6 x 22 = 12 x 11) block b met the same query block of every
// head: 6 blocks (4096) or 12 (2048) took every partial unit and 44 took 22 full ones; rotated,
// each takes about one partial in 22 (11) units: 1.01-1.02x there, the same rounds elsewhere
// (NOTES.md, h20). Causal units cost the same (paired) or are one block
// each: the plain walk, the tree before's code.
template <typename T, bool Causal>
struct UnitWalk {
    static constexpr bool kRotate = !Causal;
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


// Position in the K/V ring, carried across tiles: a tile's key tile j's stage and the parity
// of its use (Sm90Choices::kRingFromZero picks the representation). Carried as a count (a
// tile's key tiles go on where the block's earlier ones left the ring), or every tile from
// stage 0 with each stage's use parity carried, a bit a stage, which only the barrier waits
// read: ptxas computed the three-consumer key loop's stage descriptors per thread from a count
// carried through the tile loop (NOTES "h45", f8).
template <bool FromZero>
struct RingPosition;

template <>
struct RingPosition<false> {
    int count = 0;
    template <int Stages>
    __host__ __device__ __forceinline__ int stage(int j) const { return (count + j) % Stages; }
    template <int Stages>
    __host__ __device__ __forceinline__ uint32_t phase(int j) const {
        return uint32_t(((count + j) / Stages) & 1);
    }
    template <int Stages>
    __host__ __device__ __forceinline__ void after(int n) {
        count += n;
    }
};

template <>
struct RingPosition<true> {
    uint32_t used = 0;  // bit s: the parity of stage s's uses by the block's earlier tiles
    template <int Stages>
    __host__ __device__ __forceinline__ int stage(int j) const { return j % Stages; }
    template <int Stages>
    __host__ __device__ __forceinline__ uint32_t phase(int j) const {
        return ((used >> (j % Stages)) ^ uint32_t(j / Stages)) & 1u;
    }
    // After a tile of n key tiles: stage s took (n - s + Stages - 1) / Stages of them.
    template <int Stages>
    __host__ __device__ __forceinline__ void after(int n) {
#pragma unroll
        for (int s = 0; s < Stages; ++s)
            if (n > s) used ^= (uint32_t((n - s + Stages - 1) / Stages) & 1u) << s;
    }
#ifdef __CUDACC__
    // The stages' parities broadcast from lane 0: ptxas then checks their uniformity once a
    // tile and keeps the key loop's waits convergent (three consumers: 561 -> 558
    // instructions, BSSY 3 -> 1; NOTES "h45").
    __device__ __forceinline__ RingPosition warp_uniform() const {
        RingPosition at = *this;
        at.used = __shfl_sync(0xffffffffu, used, 0);
        return at;
    }
#endif
};

// The ring position kernel <T, Causal>'s producer and consumers walk alike.
template <typename T, bool Causal>
using Sm90Ring = RingPosition<Sm90Choices<T, Causal>::kRingFromZero>;
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
// phase before its first, so the first pass over each buffer does not wait. Then, where the
// last round is split (Tail, flash_fwd_sm90_split.cuh), the block's pieces of it alike.
template <typename T, bool Causal, typename Tail>
__device__ __forceinline__ void produce(const FwdKernelParams& p, const Sm90Smem<T>& sm,
                                        const TileSchedule<T, Causal>& schedule,
                                        const CUtensorMap* tma_q, const CUtensorMap* tma_k,
                                        const CUtensorMap* tma_v, const Tail& tail) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes, kKVBlockBytes = T::kBlockN * T::kRowBytes;
    constexpr int S = T::kStages;
    // L2 hints: K and V are read by every block of their head, Q once (NOTES.md, h21).
    auto load = [](uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                   int c3, uint64_t policy) {
        sm90::tma_load_4d_hint(dst, map, bar, c0, c1, c2, c3, policy);
    };
    Sm90Ring<T, Causal> ring;
    int q_loads = 0;
    auto produce_tile = [&](const Tile& tile) {
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
                load(buffer + cb * kKVBlockBytes, map, full, cb * 64,
                     (tile.n_begin + j) * T::kBlockN, kv_head, tile.batch, sm90::kEvictLast);
        };
        for (int j = 0; j < tile.n_blocks; ++j) {
            const int stage = ring.stage<S>(j);
            const uint32_t phase = ring.phase<S>(j);
            load_kv(sm.k(stage), tma_k, sm.full_k(stage), sm.empty_k(stage), phase, j);
            load_kv(sm.v(stage), tma_v, sm.full_v(stage), sm.empty_v(stage), phase, j);
        }
        ring.after<S>(tile.n_blocks);
    };
    // Each tile of each of this block's work units, in order (one loop body for both).
    for (UnitWalk<T, Causal> walk(schedule); walk.u < schedule.units; walk.next(schedule))
    for (int k = 0; k < schedule.tiles_in(walk.u); ++k) {
        const int u = walk.u;
        const Tile tile = schedule.tile(p, u, k);
        if (tile.n_blocks == 0) continue;
        produce_tile(tile);
    }
    if constexpr (Tail::kSplit) {
        tail.for_each_piece(blockIdx.x, [&](const TailPiece& piece) {
            Tile tile = schedule.tile(p, piece.unit, 0);
            tile.n_begin = piece.n_begin;
            tile.n_blocks = piece.n_blocks;
            produce_tile(tile);
        });
    }
}

}  // namespace flash
