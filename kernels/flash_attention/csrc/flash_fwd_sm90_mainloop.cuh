// The Hopper kernel's main loop: a consumer warpgroup's S = Q K^T and O += P V (wgmma), the
// turns the consumer warpgroups take at the tensor core, and one tile's walk over its key tiles
// (consume_tile, in named steps), then the epilogue.
#pragma once

#include <stdint.h>
#include "flash_api.h"
#include "flash_fwd_sm90_choices.cuh"
#include "flash_fwd_sm90_epilogue.cuh"
#include "flash_fwd_sm90_schedule.cuh"
#include "kernel_traits.h"
#include "mask.h"
#include "sm90_utils.h"
#include "softmax.h"
#include "utils.h"

namespace flash {

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

// P (probabilities, fp32 C fragments) as the 16-bit A fragments of P V, one per 16 keys (those
// of 16-key steps [From, To)).
template <typename T, int From = 0, int To = T::kBlockN / 16>
__device__ __forceinline__ void pack_probabilities(uint32_t (&pa)[T::kBlockN / 16][4],
                                                   const float (&p)[T::kNTiles][4]) {
    using Elem = typename T::Elem;
#pragma unroll
    for (int kk = From; kk < To; ++kk) {
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

// The bits of every value of x (of its rows [From, To)) or-ed together: of probabilities (>= 0),
// a float >= 0 or NaN; of probabilities packed two to a word (16-bit halves >= 0), the same.
__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t bits_of(uint32_t x) { return x; }
template <int From = 0, int To = -1, typename V, int N>
__device__ __forceinline__ float or_bits(const V (&x)[N][4]) {
    uint32_t bits = 0;
#pragma unroll
    for (int t = From; t < (To < 0 ? N : To); ++t)
#pragma unroll
        for (int c = 0; c < 4; ++c) bits |= bits_of(x[t][c]);
    return __uint_as_float(bits);
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
template <typename T, typename Ring>
__device__ __forceinline__ void pass_tile(const Sm90Smem<T>& sm, const Tile& tile,
                                          const Ring& ring, const QPosition<T>& q,
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

// The steps of consume_tile on one consumer warpgroup's tile, each force-inlined: score_tile,
// the releases, the Q wait, S_0, each key tile's S_j with P_{j-1} V_{j-1}, the last P V, the
// key tiles past this warpgroup's rows, the output. They work on consume_tile's own state,
// held by reference as the lambdas before them did (the scores, `correction` and P's buffers
// are passed in). The tile is passed in too: held here, it changed the order of the tile loop's
// values in the non-causal kernels' PTX and so ptxas's register choice (the SASS of the shipped
// units is the lambdas', byte for byte: tools/flash_attention/sass_identity.py).
template <typename T, bool Causal, typename Refill>
struct TileSteps {
    using Elem = typename T::Elem;
    using Choices = Sm90Choices<T, Causal>;
    static constexpr int S = T::kStages;
    // P as P V's A fragments: one buffer, or two (Choices::kTwoP) taken in turns.
    static constexpr int kPBuffers = Choices::kTwoP ? 2 : 1;
    // h53: the 16-key steps of P whose exponentials come before the wait for P V (one P buffer
    // only), 0 for the wait after the whole softmax: all but the last in the solo kernel (D = 64
    // causal: 1.004-1.017x), 2 elsewhere (D = 64 non-causal 1.009-1.043x and D = 256 1.003-1.037x,
    // where more steps measured 0.966-0.995x and 1.00-1.028x; one process, NOTES.md h53).
    // FLASH_SM90_EXP_SPLIT: 1-14 that many (at most all but the last), 15 none.
    static constexpr int kExpSplitSteps = T::kBlockN / 16;
    static constexpr int kExpSplitChosen =
        FLASH_SM90_EXP_SPLIT == 0 ? (T::kSolo ? kExpSplitSteps - 1 : 2)
        : FLASH_SM90_EXP_SPLIT == 15
            ? 0
            : (FLASH_SM90_EXP_SPLIT < kExpSplitSteps ? FLASH_SM90_EXP_SPLIT : kExpSplitSteps - 1);
    static constexpr int kExpSplit = Choices::kTwoP ? 0 : kExpSplitChosen;
    using PFragments = uint32_t[T::kBlockN / 16][4];

    const FlashFwdParams& p;
    const Sm90Smem<T>& sm;
    const Sm90Ring<T, Causal>& ring;
    const QPosition<T>& q;
    const Pingpong<T::kConsumerWarpgroups>& turns;
    const Refill& refill;
    const int &consumer_warp, &lane, &consumer_wg, &n_blocks, &m0, &causal_offset;
    const float& scale_log2;
    const Sm90Descriptors& desc;
    const int& q_stage;
    float (&o_acc)[1][T::kDTiles][4];
    float (&l_acc)[1][1][4];
    OnlineSoftmax<1>& softmax;

    // Masks tile j's raw scores where it runs past the keys or (causal) a row's last key.
    __device__ __forceinline__ void mask_tile(float (&s)[1][T::kNTiles][4], int j) const {
        const int n0 = j * T::kBlockN;
        const bool tail = n0 + T::kBlockN > p.seqlen_k;
        const bool diagonal = Causal && n0 + T::kBlockN - 1 > m0 + causal_offset;
        if (tail || diagonal)
            mask_scores<T, Causal>(s, m0, n0, p.seqlen_k, causal_offset, consumer_warp, lane);
    }
    // Masks tile j's raw scores where needed and folds them into the softmax state; whether
    // the reference max moved (O then needs `correction`).
    __device__ __forceinline__ bool score_tile(float (&s)[1][T::kNTiles][4], int j,
                                               float (&correction)[1][2]) const {
        mask_tile(s, j);
        if constexpr (Choices::kLazyRescale)
            return softmax.template fold_lazy<Choices::kTreeMax, Choices::kSumParts>(
                s, correction, scale_log2);
        else
            return softmax.template fold<Choices::kTreeMax, Choices::kSumParts>(s, correction,
                                                                                scale_log2);
    }
    // K_j is free once S_j landed; after the tile's last S, so is Q.
    __device__ __forceinline__ void release_k(int j) const {
        if constexpr (T::kSolo) {
            refill.k_done(j);
        } else if (lane == 0) {
            sm90::mbarrier_arrive(sm.empty_k(ring.stage<S>(j)));
            if (j == n_blocks - 1) sm90::mbarrier_arrive(sm.empty_q(q.stage));
        }
    }
    __device__ __forceinline__ void release_v(int j) const {
        if constexpr (T::kSolo)
            refill.v_done(j);
        else if (lane == 0)
            sm90::mbarrier_arrive(sm.empty_v(ring.stage<S>(j)));
    }

    // Waits for the tile's Q; a negative scale is folded into this warpgroup's Q rows
    // (softmax.h), then handed to wgmma.
    __device__ __forceinline__ void wait_q() const {
        sm90::mbarrier_wait(sm.full_q(q.stage), q.phase);
        if (p.scale < 0.f) {
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
    }

    // S_0 = Q K_0^T alone, its softmax, P_0 into `p0`.
    __device__ __forceinline__ void first_tile(float (&s)[1][T::kNTiles][4],
                                               float (&correction)[1][2], PFragments& p0) const {
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
        pack_probabilities<T>(p0, s[0]);
    }

    // Key tile j: S_j with P_{j-1} V_{j-1} (P_{j-1} in p_prev), the softmax of S_j under P V,
    // P_j into p_next. One buffer (p_prev is p_next): P_j is packed once P V has landed, after
    // the softmax. Two: P_j is packed as the exponentials come, into the buffer the MMA in
    // flight does not read (NOTES.md, h28).
    __device__ __forceinline__ void key_tile(float (&s)[1][T::kNTiles][4],
                                             float (&correction)[1][2], int j,
                                             const PFragments& p_prev, PFragments& p_next) const {
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
        if constexpr (kExpSplit > 0) {
            split_softmax(s, correction, j, p_next);
            return;
        }
        const bool moved = score_tile(s, j, correction);
        if constexpr (Choices::kTwoP) pack_probabilities<T>(p_next, s[0]);
        // Without this, ptxas hoists the wait below to just after wait<1>: the softmax then ran
        // after P_{j-1} V_{j-1} had landed, not under it (NOTES.md, h10). The pin depends on
        // every exponential: through the row sums, or, where the tensor core sums the rows,
        // through the probabilities' bits; with two P buffers also through the packed P's bits,
        // so that ptxas packs them before the wait too (it otherwise sinks the packs to the next
        // tile's P V).
        const float pinned =
            T::kRowSumMma ? or_bits(s[0]) : softmax.row_sum[0][0] + softmax.row_sum[0][1];
        sm90::order_wait_after(Choices::kTwoP ? __uint_as_float(__float_as_uint(or_bits(p_next)) |
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
    }

    // h53 (one P buffer): the wait for P_{j-1} V_{j-1} after the exponentials of S_j's first
    // kExpSplit 16-key steps, not after the whole softmax, so that their packing runs under the
    // rest's exponentials (FP8's f13); the same arithmetic in the same order. O's rescale last:
    // a branch before the rest would end the block ptxas schedules them in.
    __device__ __forceinline__ void split_softmax(float (&s)[1][T::kNTiles][4],
                                                  float (&correction)[1][2], int j,
                                                  PFragments& p_next) const {
        constexpr int kParts = Choices::kSumParts;
        mask_tile(s, j);
        float m_use[1][2], part[1][2][kParts];
        const bool moved = softmax.template fold_maxima<Choices::kLazyRescale, Choices::kTreeMax>(
            s, correction, m_use, scale_log2);
        softmax.template exponentiate_range<kParts, 0, 2 * kExpSplit>(s, m_use, scale_log2, part);
        // The pin (key_tile's) on every exponential of the first steps, through their bits: a
        // partial sum pins only the exponentials it adds (at D = 256 one part of four, and
        // ptxas hoisted the wait above the rest), and a sum of exponentials alone ptxas proves
        // >= 0, dropping the pin (FP8, f13).
        sm90::order_wait_after(or_bits<0, 2 * kExpSplit>(s[0]), sm.scratch());
        sm90::wgmma_wait<0>();
        sm90::fence_registers(o_acc[0]);
        if constexpr (T::kRowSumMma) sm90::fence_registers(l_acc[0]);
        release_v(j - 1);
        pack_probabilities<T, 0, kExpSplit>(p_next, s[0]);
        softmax.template exponentiate_range<kParts, 2 * kExpSplit, T::kNTiles>(s, m_use,
                                                                                scale_log2, part);
        softmax.template add_parts<kParts>(part);
        pack_probabilities<T, kExpSplit, T::kBlockN / 16>(p_next, s[0]);
        if (moved) {
            OnlineSoftmax<1>::rescale_output(o_acc, correction);
            if constexpr (T::kRowSumMma) OnlineSoftmax<1>::rescale_output(l_acc, correction);
        }
    }

    // The tile's last P V, from buffer `p_last`.
    __device__ __forceinline__ void last_pv(const PFragments& p_last) const {
        const int last = ring.stage<S>(n_blocks - 1);
        sm90::mbarrier_wait(sm.full_v(last), ring.phase<S>(n_blocks - 1));
        turns.take_turn();
        sm90::wgmma_fence();
        pv_wgmma<T, Choices::kDescriptorSteps>(o_acc[0], l_acc[0], p_last, sm, last, desc);
        sm90::wgmma_commit();
        turns.pass_turn();
        sm90::wgmma_wait<0>();
        sm90::fence_registers(o_acc[0]);
        if constexpr (T::kRowSumMma) sm90::fence_registers(l_acc[0]);
        release_v(n_blocks - 1);
    }

    // Key tiles 1 .. n_blocks - 1, then the last P V.
    __device__ __forceinline__ void key_tiles(float (&s)[1][T::kNTiles][4],
                                              float (&correction)[1][2],
                                              PFragments (&pa)[kPBuffers]) const {
        if constexpr (Choices::kTwoP) {
            // Two key tiles an iteration, so that each buffer is a fixed set of registers.
            int j = 1;
            for (; j + 1 < n_blocks; j += 2) {
                key_tile(s, correction, j, pa[0], pa[kPBuffers - 1]);
                key_tile(s, correction, j + 1, pa[kPBuffers - 1], pa[0]);
            }
            if (j < n_blocks) {
                key_tile(s, correction, j, pa[0], pa[kPBuffers - 1]);
                last_pv(pa[kPBuffers - 1]);
            } else {
                last_pv(pa[0]);
            }
        } else {
            for (int j = 1; j < n_blocks; ++j) key_tile(s, correction, j, pa[0], pa[0]);
            last_pv(pa[0]);
        }
    }

    // Choices::kOwnKeyBound: the tile's key tiles past this warpgroup's last visible key: their
    // turns (the math took n_blocks + 1, the tile has tile.n_blocks + 1) and releases, without
    // math, each buffer waited for first (pass_tile says why). No visible key at all: the whole
    // tile passed, and the rows written as zeros by the output.
    __device__ __forceinline__ void pass_hidden_key_tiles(const Tile& tile) const {
        if constexpr (Choices::kOwnKeyBound) {
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
    }

    // O normalized, lse, O stored (flash_fwd_sm90_epilogue.cuh).
    __device__ __forceinline__ void write_output(const Tile& tile, const CUtensorMap* tma_o) const {
        float* lse = p.lse + ((int64_t)tile.batch * p.heads + tile.head) * p.seqlen_q;
        if constexpr (T::kStageOHalves) {
            write_output_tma_halves<T>(o_acc[0], l_acc[0], softmax, sm, tma_o, tile, lse, m0,
                                       p.seqlen_q, consumer_warp, lane);
        } else if constexpr (Choices::kTmaStore) {
            write_output_tma<T>(o_acc[0], l_acc[0], softmax, sm, tma_o, tile, lse, m0, p.seqlen_q,
                                consumer_warp, lane);
        } else {
            Elem* o = static_cast<Elem*>(p.o) + tile.batch * p.o_batch_stride +
                      tile.head * p.o_head_stride;
            write_output_sm90<T>(o_acc[0], l_acc[0], softmax, o, p.o_row_stride, lse, m0,
                                 p.seqlen_q, consumer_warp, lane);
        }
    }
};

// One consumer warpgroup, one tile: its 64 query rows against every K/V tile of the tile's
// keys, from ring position `ring`, then the output. S_{j+1} = Q K_{j+1}^T and O += P_j V_j are
// issued together; the softmax of tile j + 1 runs while P_j V_j is in flight, and O is rescaled
// once it has landed (NOTES.md, h2). The state is here, the steps in TileSteps. A Piece of a
// split last round (flash_fwd_sm90_split.cuh) writes its rows to its slot, p.o and p.lse.
template <typename T, bool Causal, typename Refill = ProducerRefill, bool Piece = false>
__device__ __forceinline__ void consume_tile(const FlashFwdParams& p, const Sm90Smem<T>& sm,
                                             const Tile& tile, const Sm90Ring<T, Causal>& ring,
                                             const QPosition<T>& q,
                                             const Pingpong<T::kConsumerWarpgroups>& turns,
                                             const CUtensorMap* tma_o, int consumer_warp,
                                             int lane, const Refill& refill = Refill()) {
    using Choices = Sm90Choices<T, Causal>;
    using Steps = TileSteps<T, Causal, Refill>;
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
    const Steps steps{p,    sm,          ring,     q,  turns,         refill,     consumer_warp,
                      lane, consumer_wg, n_blocks, m0, causal_offset, scale_log2, desc,
                      q_stage, o_acc, l_acc, softmax};

    if (n_blocks > 0) {
        steps.wait_q();
        float s[1][T::kNTiles][4], correction[1][2];
        typename Steps::PFragments pa[Steps::kPBuffers];
        steps.first_tile(s, correction, pa[0]);
        steps.key_tiles(s, correction, pa);
    }
    steps.pass_hidden_key_tiles(tile);
    if constexpr (Piece)
        write_piece<T>(o_acc[0], l_acc[0], softmax, static_cast<float*>(p.o), p.lse,
                       consumer_warp, lane);
    else
        steps.write_output(tile, tma_o);
}

template <typename T, bool Causal, typename Tail>
__device__ __forceinline__ void consume(const FlashFwdParams& p, const Sm90Smem<T>& sm,
                                        const TileSchedule<T, Causal>& schedule,
                                        const CUtensorMap* tma_o, int consumer_warp, int lane,
                                        const Tail& tail) {
    const Pingpong<T::kConsumerWarpgroups> turns{consumer_warp / 4};
    turns.start();
    Sm90Ring<T, Causal> ring;
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
        auto take = [&](const auto& at) {
            if (idle)
                pass_tile<T>(sm, tile, at, q, turns, lane);
            else
                consume_tile<T, Causal>(p, sm, tile, at, q, turns, tma_o, consumer_warp, lane);
        };
        // From stage 0, the parities as lane 0 holds them (RingPosition<true>::warp_uniform).
        // One lambda for both: a member handing the count's position back by reference
        // changed the count kernels' PTX (D = 128 and 256, one register; NOTES "h46").
        if constexpr (Sm90Choices<T, Causal>::kRingFromZero)
            take(ring.warp_uniform());
        else
            take(ring);
        ring.after<T::kStages>(tile.n_blocks);
        q_loads += tile.n_blocks > 0;
    }
    // The block's pieces of a split last round: key tiles from n_begin, which the mask sees as
    // a launch of that many keys fewer, each piece's rows to its slot (non-causal only).
    if constexpr (Tail::kSplit) {
        static_assert(!Causal, "a causal tile's keys end at its diagonal");
        tail.for_each_piece(blockIdx.x, [&](const TailPiece& piece) {
            Tile tile = schedule.tile(p, piece.unit, 0);
            tile.n_begin = piece.n_begin;
            tile.n_blocks = piece.n_blocks;
            FlashFwdParams part = p;
            part.seqlen_k = p.seqlen_k - piece.n_begin * T::kBlockN;
            part.o = tail.o + (int64_t)piece.slot * T::kBlockM * T::kHeadDim;
            part.lse = tail.lse + (int64_t)piece.slot * T::kBlockM;
            const bool idle = T::kConsumerWarpgroups > 2 &&
                              tile.m_block * T::kBlockM + turns.consumer_wg * 64 >= p.seqlen_q;
            const QPosition<T> q(q_loads);
            const auto at = [&] {
                if constexpr (Sm90Choices<T, Causal>::kRingFromZero)
                    return ring.warp_uniform();
                else
                    return ring;
            }();
            if (idle)
                pass_tile<T>(sm, tile, at, q, turns, lane);
            else
                consume_tile<T, Causal, ProducerRefill, true>(part, sm, tile, at, q, turns,
                                                              tma_o, consumer_warp, lane);
            ring.after<T::kStages>(tile.n_blocks);
            ++q_loads;
        });
    }
    turns.finish();
    // The block's shared memory must outlive the reads of this warp's last TMA store.
    if constexpr (Sm90Choices<T, Causal>::kTmaStore) {
        if (lane == 0) sm90::bulk_wait_group<0>();
    }
}

}  // namespace flash
