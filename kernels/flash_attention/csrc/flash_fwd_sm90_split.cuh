// The last partial round of a persistent non-causal grid split over the keys (NOTES.md, h50):
// a grid of G blocks takes U equal units in ceil(U / G) rounds, and where the last round has
// r < G units, G - r blocks idle through it. Split, the whole rounds run as before and the
// last round's r x n key tiles (n a unit's) are shared out evenly: block b takes key tiles
// [start(b), start(b + 1)) of them in order, which are pieces of at most two units. A piece
// writes its rows' O (normalised by its own row sums) and lse to a slot of a workspace in
// float32, and flash_split_combine_kernel merges each unit's pieces by their lse after the
// grid, the way a split-KV decode combines (O = sum_i exp(lse_i - lse) O_i).
#pragma once

#include <math.h>
#include <stdint.h>

#include "flash_api.h"
#include "softmax.h"
#include "utils.h"

namespace flash {

// One piece of the tail: key tiles [n_begin, n_begin + n_blocks) of unit `unit`, written to
// workspace slot `slot`. Never a whole unit: the tail's blocks outnumber its units, so each
// block's share is shorter than a unit and every unit has two pieces or more.
struct TailPiece {
    int unit, n_begin, n_blocks, slot;
};

// The launcher's split of the tail (sm90_tail_split), passed to the kernels by value. Slot of
// block b's piece of tail unit t: b + t (block b's pieces lie in units t and t + 1, and block
// b + 1 starts in unit t + 1 or later, so no two pieces share one); slots = blocks + tail_units.
struct TailSplit {
    static constexpr bool kSplit = true;
    int whole;        // units the grid takes in whole rounds, before the tail
    int tail_units;   // r: the units after them
    int n_kt;         // key tiles a unit
    int blocks;       // blocks sharing the tail (> tail_units: no piece is a whole unit's)
    float* o;         // slot s: rows x head_dim floats from o + s * rows * head_dim
    float* lse;       // slot s: rows floats from lse + s * rows

    __host__ __device__ __forceinline__ int whole_units() const { return whole; }
    __host__ __device__ __forceinline__ int64_t start(int b) const {
        return (int64_t)b * tail_units * n_kt / blocks;
    }
    // Calls fn(piece) for each of block b's pieces, in order.
    template <typename Fn>
    __device__ __forceinline__ void for_each_piece(int b, Fn&& fn) const {
        if (b >= blocks) return;
        const int64_t end = start(b + 1);
        for (int64_t pos = start(b); pos < end;) {
            const int t = (int)(pos / n_kt);
            const int n_begin = (int)(pos - (int64_t)t * n_kt);
            const int64_t unit_end = (int64_t)(t + 1) * n_kt;
            const int n_blocks = (int)((end < unit_end ? end : unit_end) - pos);
            fn(TailPiece{whole + t, n_begin, n_blocks, b + t});
            pos += n_blocks;
        }
    }
};

// No split: the kernels' walk alone (every launch but a split one).
struct NoTailSplit {
    static constexpr bool kSplit = false;
    __host__ __device__ __forceinline__ int whole_units() const { return INT32_MAX; }
    template <typename Fn>
    __device__ __forceinline__ void for_each_piece(int, Fn&&) const {}
};

// A piece's rows into its slot: O normalised by the piece's row sums, as float32, and lse.
// Rows past seqlen_q are written too (the slot is the piece's own; the combine skips them).
template <typename T>
__device__ __forceinline__ void write_piece(const float (&o_acc)[T::kDTiles][4],
                                            const float (&l_acc)[1][4],
                                            const OnlineSoftmax<1>& softmax, float* o_slot,
                                            float* lse_slot, int consumer_warp, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float sum = T::kRowSumMma ? l_acc[0][2 * h] : softmax.total(0, h);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int r = consumer_warp * 16 + lane / 4 + h * 8;
        if (lane % 4 == 0) lse_slot[r] = softmax.lse(0, h, sum);
        float* row = o_slot + r * T::kHeadDim + (lane % 4) * 2;
#pragma unroll
        for (int t = 0; t < T::kDTiles; ++t)
            *reinterpret_cast<float2*>(row + t * 8) =
                make_float2(o_acc[t][2 * h] * inv, o_acc[t][2 * h + 1] * inv);
    }
}

// Pieces a unit has at most: the launcher keeps each block's share of the tail at least a
// seventh of a unit (sm90_tail_split), so a unit meets at most eight blocks.
constexpr int kMaxPiecesPerUnit = 8;

// Each split unit's pieces merged into O and lse: a block of 128 threads per 8 rows of a unit,
// 16 threads a row, 4 columns a thread (head dim 64), every piece's lse and columns loaded
// before any is used (one thread's loads all in flight: the first version, 8 columns a thread
// and a loop over the pieces, took 4.7 us at 10 heads, 4096 rows; NOTES.md h50). Launched as
// the grid's programmatic dependent (launch_sm90_split): its blocks may start as the grid's
// blocks exit, and wait here for the whole grid's writes.
template <typename T>
__global__ void __launch_bounds__(128)
    flash_split_combine_kernel(const FlashFwdParams p, const TailSplit tail, int m_blocks) {
    using Elem = typename T::Elem;
    static_assert(T::kHeadDim == 64 && T::kBlockM % 8 == 0, "16 threads x 4 columns a row");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int t = blockIdx.x;
    const int row = blockIdx.y * 8 + threadIdx.x / 16, col = (threadIdx.x % 16) * 4;
    const int unit = tail.whole + t;
    const int m_block = unit % m_blocks, hb = unit / m_blocks;
    const int head = hb % p.heads, batch = hb / p.heads;
    const int q_row = m_block * T::kBlockM + row;
    if (q_row >= p.seqlen_q) return;
    // The blocks whose key tiles meet unit t's [t n, (t + 1) n): b0 .. b0 + pieces - 1.
    const int64_t first = (int64_t)t * tail.n_kt, last = first + tail.n_kt;
    int b0 = (int)(first * tail.blocks / ((int64_t)tail.tail_units * tail.n_kt));
    while (b0 > 0 && tail.start(b0) > first) --b0;
    while (tail.start(b0 + 1) <= first) ++b0;
    int pieces = 1;
    while (pieces < kMaxPiecesPerUnit && b0 + pieces < tail.blocks &&
           tail.start(b0 + pieces) < last)
        ++pieces;
    float lse[kMaxPiecesPerUnit];
    float4 o[kMaxPiecesPerUnit];
#pragma unroll
    for (int i = 0; i < kMaxPiecesPerUnit; ++i) {
        if (i < pieces) {
            const int64_t slot = b0 + i + t;
            lse[i] = tail.lse[slot * T::kBlockM + row];
            o[i] = *reinterpret_cast<const float4*>(tail.o +
                                                    (slot * T::kBlockM + row) * T::kHeadDim + col);
        }
    }
    float m = lse[0];
#pragma unroll
    for (int i = 1; i < kMaxPiecesPerUnit; ++i)
        if (i < pieces) m = fmaxf(m, lse[i]);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPiecesPerUnit; ++i) {
        if (i < pieces) {
            const float w = __expf(lse[i] - m);
            total += w;
            acc.x += w * o[i].x, acc.y += w * o[i].y, acc.z += w * o[i].z, acc.w += w * o[i].w;
        }
    }
    const float inv = 1.f / total;
    uint2 out;
    out.x = Mma<Elem>::pack(acc.x * inv, acc.y * inv);
    out.y = Mma<Elem>::pack(acc.z * inv, acc.w * inv);
    Elem* dst = static_cast<Elem*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride +
                (int64_t)q_row * p.o_row_stride + col;
    *reinterpret_cast<uint2*>(dst) = out;
    if (col == 0)
        p.lse[((int64_t)batch * p.heads + head) * p.seqlen_q + q_row] = m + __logf(total);
}

}  // namespace flash
