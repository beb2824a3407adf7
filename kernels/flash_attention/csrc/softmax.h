// Online softmax over K tiles, in registers, for the sm_80 kernel's mma fragments.
#pragma once

#include <float.h>
#include <math.h>

#include "utils.h"

namespace flash {

// The factor that turns a raw score into a base-2 exponent: |scale| * log2(e), positive and
// normal. max(c * s) = c * max(s) holds only for c > 0, so a negative scale is folded into Q
// (its sign flipped, exactly) and only |scale| remains; a zero factor would turn masked -inf
// scores into NaN, and a scale under FLT_MIN weighs every score within fp32 rounding of a
// zero scale's equal weights, which is what the clamp gives.
__device__ __forceinline__ float score_scale_log2(float scale) {
    return fmaxf(fabsf(scale) * kLog2e, FLT_MIN);
}

// Each thread holds two rows (lane / 4 and lane / 4 + 8) of every m-tile; the 4 threads of a
// quad share a row, so row reductions are two xor-shuffles.
template <int MTiles>
struct OnlineSoftmax {
    // Running max of the scaled scores, in log2 units (exp2 needs no further scaling), and
    // this thread's partial row sums of exp2(score - max).
    float row_max[MTiles][2], row_sum[MTiles][2];

    __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) row_max[mt][h] = -INFINITY, row_sum[mt][h] = 0.f;
    }

    // Max raw score of row half h of m-tile mt over one tile (the quad shares a row). Tree:
    // four partial maxima, each over every fourth n8 tile, combined last, so that the
    // maxima's latency overlaps (ptxas keeps the order of fmaxf: as one chain, each waits on
    // the one before). A maximum is exact in any order, so both give the same value.
    template <bool Tree = false, int NTiles>
    static __device__ __forceinline__ float tile_max(const float (&s)[MTiles][NTiles][4], int mt,
                                                     int h) {
        float mx = -INFINITY;
        if constexpr (Tree && NTiles % 4 == 0) {
            float part[4];
#pragma unroll
            for (int t = 0; t < NTiles; ++t) {
                const float pair = fmaxf(s[mt][t][2 * h], s[mt][t][2 * h + 1]);
                part[t % 4] = t < 4 ? pair : fmaxf(part[t % 4], pair);
            }
            mx = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
        } else {
#pragma unroll
            for (int t = 0; t < NTiles; ++t)
                mx = fmaxf(mx, fmaxf(s[mt][t][2 * h], s[mt][t][2 * h + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        return fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    }

    // The running max of row half h of m-tile mt once tile s is in (over scaled scores, so
    // scale_log2 > 0 is needed), and the value its scores are shifted by: 0 while the row has
    // seen only masked keys (max -inf), so that no inf - inf occurs.
    template <bool TreeMax = false, int NTiles>
    __device__ __forceinline__ float2 next_max(const float (&s)[MTiles][NTiles][4], int mt, int h,
                                               float scale_log2) const {
        const float mx = fmaxf(row_max[mt][h], tile_max<TreeMax>(s, mt, h) * scale_log2);
        return make_float2(mx, mx == -INFINITY ? 0.f : mx);
    }

    // s -> exp2(s * scale_log2 - m_use) for row half h of m-tile mt, summed into row_sum.
    // SumParts > 1: the tile's sum as that many partial sums (over every SumParts-th value),
    // added to row_sum last, so that the additions' latency overlaps (ptxas keeps the order of
    // float additions: as one chain, each waits on the one before). In fp32 the order moves
    // the sum by rounding only. No default: a caller that forgets to pass its choice does not
    // compile.
    template <int SumParts, int NTiles>
    __device__ __forceinline__ void exponentiate(float (&s)[MTiles][NTiles][4], int mt, int h,
                                                 float m_use, float scale_log2) {
        static_assert(SumParts == 1 || SumParts == 2 || SumParts == 4, "1, 2 or 4 parts");
        static_assert((2 * NTiles) % SumParts == 0, "the parts divide a row half's values");
        if constexpr (SumParts > 1) {
            float part[SumParts];
#pragma unroll
            for (int i = 0; i < 2 * NTiles; ++i) {
                float& x = s[mt][i / 2][2 * h + i % 2];
                x = fast_exp2(fmaf(x, scale_log2, -m_use));
                part[i % SumParts] = i < SumParts ? x : part[i % SumParts] + x;
            }
            float tile_sum = part[0] + part[1];
            if constexpr (SumParts == 4) tile_sum += part[2] + part[3];
            row_sum[mt][h] += tile_sum;
        } else {
#pragma unroll
            for (int t = 0; t < NTiles; ++t) {
#pragma unroll
                for (int c = 2 * h; c < 2 * h + 2; ++c) {
                    s[mt][t][c] = fast_exp2(fmaf(s[mt][t][c], scale_log2, -m_use));
                    row_sum[mt][h] += s[mt][t][c];
                }
            }
        }
    }

    // Scales row half h of m-tile mt, its sum and its O accumulators, by `correction`.
    template <int DTiles>
    __device__ __forceinline__ void rescale_row(float (&o_acc)[MTiles][DTiles][4], int mt, int h,
                                                float correction) {
        row_sum[mt][h] *= correction;
#pragma unroll
        for (int t = 0; t < DTiles; ++t) {
            o_acc[mt][t][2 * h] *= correction;
            o_acc[mt][t][2 * h + 1] *= correction;
        }
    }

    // Folds one tile of raw scores in: moves the maxima, rescales the sums and o_acc to them,
    // and replaces s by the unnormalised probabilities exp2(s * scale_log2 - max).
    template <int NTiles, int DTiles>
    __device__ __forceinline__ void update(float (&s)[MTiles][NTiles][4],
                                           float (&o_acc)[MTiles][DTiles][4], float scale_log2) {
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float2 m = next_max(s, mt, h, scale_log2);
                const float mx = m.x, m_use = m.y;
                // Once the maxima settle (after the first few tiles on most rows) the rescale
                // multiplies by exactly 1: skip it unless a row of these 8 moved. The vote
                // keeps the branch uniform across the warp.
                if (__any_sync(0xffffffff, mx != row_max[mt][h]))
                    rescale_row(o_acc, mt, h, fast_exp2(row_max[mt][h] - m_use));
                row_max[mt][h] = mx;
                exponentiate<1>(s, mt, h, m_use, scale_log2);
            }
        }
    }

    // update() with lazy rescaling: a row's reference max moves only when a tile's scores
    // pass it by more than kLazyLog2, so the exponentials stay <= 2^kLazyLog2 (exact in fp32,
    // and in fp16/bf16 once packed for P.V) and o_acc is rescaled on few tiles after the
    // first. row_max stays the reference the sums are taken against, so lse() and the final
    // division are unchanged. When one row of the warp moves, every row takes its true max
    // (the rescale is paid for the warp anyway).
    static constexpr float kLazyLog2 = 8.f;
    template <int NTiles, int DTiles>
    __device__ __forceinline__ void update_lazy(float (&s)[MTiles][NTiles][4],
                                                float (&o_acc)[MTiles][DTiles][4],
                                                float scale_log2) {
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float tile = tile_max(s, mt, h) * scale_log2;
                // -inf + kLazyLog2 is -inf: a row's first visible key always moves it.
                if (__any_sync(0xffffffff, tile > row_max[mt][h] + kLazyLog2)) {
                    const float mx = fmaxf(row_max[mt][h], tile);
                    const float m_use = mx == -INFINITY ? 0.f : mx;
                    rescale_row(o_acc, mt, h, fast_exp2(row_max[mt][h] - m_use));
                    row_max[mt][h] = mx;
                }
                exponentiate<1>(s, mt, h, row_max[mt][h] == -INFINITY ? 0.f : row_max[mt][h],
                                scale_log2);
            }
        }
    }

    // fold() and rescale_output() split update() for a caller whose o_acc is still being
    // written by an asynchronous MMA (the Hopper kernel): fold() moves the maxima and sums
    // and exponentiates s, leaving in `correction` the factor o_acc owes each row, which
    // rescale_output() applies once the MMA has landed. Returns whether any row of the warp
    // moved its max (warp-uniform): if none did, every factor is exactly 1. TreeMax: tile_max's;
    // SumParts: exponentiate's.
    template <bool TreeMax, int SumParts, int NTiles>
    __device__ __forceinline__ bool fold(float (&s)[MTiles][NTiles][4],
                                         float (&correction)[MTiles][2], float scale_log2) {
        bool moved = false;
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_use = move_max<TreeMax>(s, mt, h, correction, moved, scale_log2);
                exponentiate<SumParts>(s, mt, h, m_use, scale_log2);
            }
        }
        return __any_sync(0xffffffff, moved);
    }

    // fold()'s step for row half h of m-tile mt: its max moved to the tile's, the sum rescaled
    // to it, the factor O owes in `correction`, `moved` set if it moved; the value its
    // exponentials are taken against.
    template <bool TreeMax, int NTiles>
    __device__ __forceinline__ float move_max(const float (&s)[MTiles][NTiles][4], int mt, int h,
                                              float (&correction)[MTiles][2], bool& moved,
                                              float scale_log2) {
        const float2 m = next_max<TreeMax>(s, mt, h, scale_log2);
        correction[mt][h] = fast_exp2(row_max[mt][h] - m.y);
        row_sum[mt][h] *= correction[mt][h];
        moved |= m.x != row_max[mt][h];
        row_max[mt][h] = m.x;
        return m.y;
    }

    // fold() with update_lazy()'s rule: the reference max each row's exponentials are taken
    // against moves only when a tile's scaled scores pass it by more than kLazyLog2 (and then,
    // the vote being the warp's, every row of the warp takes its true max), so that after the
    // first tiles `correction` is 1 and the caller's O rescale is skipped. The exponentials stay
    // <= 2^kLazyLog2; row_sum and lse() are taken against the same reference.
    template <bool TreeMax, int SumParts, int NTiles>
    __device__ __forceinline__ bool fold_lazy(float (&s)[MTiles][NTiles][4],
                                              float (&correction)[MTiles][2], float scale_log2) {
        float tile[MTiles][2];
        const bool moved = lazy_vote<TreeMax>(s, tile, scale_log2);
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                exponentiate<SumParts>(s, mt, h, lazy_move(mt, h, moved, tile, correction),
                                       scale_log2);
        return moved;
    }

    // fold_lazy()'s steps: each row half's scaled tile maximum into `tile` and the warp's vote
    // on whether any row passes its reference max by more than kLazyLog2; then, per row half,
    // the move (if the vote said so: the true max, the sums rescaled) and the value its
    // exponentials are taken against.
    template <bool TreeMax, int NTiles>
    __device__ __forceinline__ bool lazy_vote(const float (&s)[MTiles][NTiles][4],
                                              float (&tile)[MTiles][2], float scale_log2) const {
        bool over = false;
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                tile[mt][h] = tile_max<TreeMax>(s, mt, h) * scale_log2;
                // -inf + kLazyLog2 is -inf: a row's first visible key always moves it.
                over |= tile[mt][h] > row_max[mt][h] + kLazyLog2;
            }
        return __any_sync(0xffffffff, over);
    }
    __device__ __forceinline__ float lazy_move(int mt, int h, bool moved,
                                               const float (&tile)[MTiles][2],
                                               float (&correction)[MTiles][2]) {
        correction[mt][h] = 1.f;
        if (moved) {
            const float mx = fmaxf(row_max[mt][h], tile[mt][h]);
            correction[mt][h] = fast_exp2(row_max[mt][h] - (mx == -INFINITY ? 0.f : mx));
            row_sum[mt][h] *= correction[mt][h];
            row_max[mt][h] = mx;
        }
        return row_max[mt][h] == -INFINITY ? 0.f : row_max[mt][h];
    }

    // fold() and fold_lazy() in parts, for a caller that waits for an asynchronous MMA between a
    // tile's first exponentials and the rest (the Hopper key loop, NOTES.md h53): fold_maxima()
    // moves the maxima and rescales the sums as fold() (Lazy: fold_lazy()) does, leaving each
    // row half's exponent shift in m_use; exponentiate_range() takes the exponentials of n8
    // tiles [From, To) of every row half, their sums carried in `part` (SumParts > 1) or in
    // row_sum (1); add_parts() adds the parts to row_sum after the last range. Per row half,
    // fold()'s arithmetic in fold()'s order.
    template <bool Lazy, bool TreeMax, int NTiles>
    __device__ __forceinline__ bool fold_maxima(const float (&s)[MTiles][NTiles][4],
                                                float (&correction)[MTiles][2],
                                                float (&m_use)[MTiles][2], float scale_log2) {
        if constexpr (Lazy) {
            float tile[MTiles][2];
            const bool moved = lazy_vote<TreeMax>(s, tile, scale_log2);
#pragma unroll
            for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    m_use[mt][h] = lazy_move(mt, h, moved, tile, correction);
            return moved;
        } else {
            bool moved = false;
#pragma unroll
            for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    m_use[mt][h] = move_max<TreeMax>(s, mt, h, correction, moved, scale_log2);
            return __any_sync(0xffffffff, moved);
        }
    }

    template <int SumParts, int From, int To, int NTiles>
    __device__ __forceinline__ void exponentiate_range(float (&s)[MTiles][NTiles][4],
                                                       const float (&m_use)[MTiles][2],
                                                       float scale_log2,
                                                       float (&part)[MTiles][2][SumParts]) {
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if constexpr (SumParts > 1) {
#pragma unroll
                    for (int i = 2 * From; i < 2 * To; ++i) {
                        float& x = s[mt][i / 2][2 * h + i % 2];
                        x = fast_exp2(fmaf(x, scale_log2, -m_use[mt][h]));
                        float& sum = part[mt][h][i % SumParts];
                        sum = i < SumParts ? x : sum + x;
                    }
                } else {
#pragma unroll
                    for (int t = From; t < To; ++t)
#pragma unroll
                        for (int c = 2 * h; c < 2 * h + 2; ++c) {
                            s[mt][t][c] = fast_exp2(fmaf(s[mt][t][c], scale_log2, -m_use[mt][h]));
                            row_sum[mt][h] += s[mt][t][c];
                        }
                }
            }
    }

    template <int SumParts>
    __device__ __forceinline__ void add_parts(const float (&part)[MTiles][2][SumParts]) {
        if constexpr (SumParts > 1) {
#pragma unroll
            for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float tile_sum = part[mt][h][0] + part[mt][h][1];
                    if constexpr (SumParts == 4) tile_sum += part[mt][h][2] + part[mt][h][3];
                    row_sum[mt][h] += tile_sum;
                }
        }
    }

    template <int DTiles>
    static __device__ __forceinline__ void rescale_output(float (&o_acc)[MTiles][DTiles][4],
                                                          const float (&correction)[MTiles][2]) {
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
            for (int t = 0; t < DTiles; ++t)
#pragma unroll
                for (int c = 0; c < 4; ++c) o_acc[mt][t][c] *= correction[mt][c >> 1];
    }

    // The full row sum (over the quad). Rows with no visible key have sum 0.
    __device__ __forceinline__ float total(int mt, int h) const {
        float sum = row_sum[mt][h];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        return sum;
    }

    // Natural-log log-sum-exp of the scaled scores of a row whose total is `sum`.
    __device__ __forceinline__ float lse(int mt, int h, float sum) const {
        // lg2.approx: absolute error ~2^-22 in log2(sum); a libm logf costs ~40 instructions
        // with branches, four times per thread in the epilogue.
        return sum > 0.f ? (row_max[mt][h] + __log2f(sum)) * kLn2 : -INFINITY;
    }
};

}  // namespace flash
