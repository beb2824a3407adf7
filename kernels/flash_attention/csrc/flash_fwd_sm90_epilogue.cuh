// The Hopper kernel's epilogue: O normalized by its rows' sums of P, lse written, O stored by
// TMA from shared memory (a whole O buffer at D = 64 and 128, D = 256's in halves), or from
// registers (D = 256 under FLASH_SM90_O_STORE=1).
#pragma once

#include <stdint.h>
#include "flash_fwd_sm90_schedule.cuh"
#include "sm90_utils.h"
#include "softmax.h"
#include "utils.h"

namespace flash {

// Row half h's n8 tiles [From, To) of O (From a multiple of 8), times `inv`, packed into a
// staging buffer of 64-column blocks kBlockBytes apart from `stage_base` (the swizzled address
// of tile From's block, row half 0).
template <typename T, int kBlockBytes, int From = 0, int To = T::kDTiles>
__device__ __forceinline__ void stage_tiles(const float (&o_acc)[T::kDTiles][4], int h,
                                            float inv, uint8_t* sq, int stage_base) {
    using Elem = typename T::Elem;
    static_assert(From % 8 == 0);
#pragma unroll
    for (int t = From; t < To; ++t) {
        const int offset = (stage_base ^ ((t % 8) << 4)) + (t - From) / 8 * kBlockBytes +
                           h * 8 * T::kRowBytes;
        *reinterpret_cast<uint32_t*>(sq + offset) =
            Mma<Elem>::pack(o_acc[t][2 * h] * inv, o_acc[t][2 * h + 1] * inv);
    }
}
// Row half h's 1 / (sum of P) (the softmax's, or with T::kRowSumMma the tensor core's), its lse
// written for row `r` of the tile where the row is inside the sequence.
template <typename T>
__device__ __forceinline__ float finish_row(const float (&l_acc)[1][4],
                                            const OnlineSoftmax<1>& softmax, int h, float* lse,
                                            int m0, int r, int seqlen_q, int lane) {
    const float sum = T::kRowSumMma ? l_acc[0][2 * h] : softmax.total(0, h);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    if (lane % 4 == 0 && m0 + r < seqlen_q) lse[m0 + r] = softmax.lse(0, h, sum);
    return inv;
}

// The staging half of write_output_tma: this warp's 16 rows of O, normalized by their sums of P
// (the softmax's, or with T::kRowSumMma the tensor core's in l_acc), packed into the O buffer
// `sq`, and their lse written. The addresses come from one base per thread: rows
// r = warp * 16 + lane / 4 + 8h, so r % 8 = lane / 4 in both halves, and the swizzled chunk
// (t ^ r % 8) is the base's bits 4-6 (lane / 4; 128-byte rows) XOR t: one XOR and a constant per
// store. Written as a row and chunk per store, the addresses depend on the thread alone: the
// compiler computed them once before the tile loop and kept them live across it, and at 160
// registers (three consumers) ptxas spilled them, 30-41 LDL a tile at D = 64 (NOTES.md, h26).
template <typename T>
__device__ __forceinline__ void stage_rows_base(float (&o_acc)[T::kDTiles][4],
                                                const float (&l_acc)[1][4],
                                                const OnlineSoftmax<1>& softmax, uint8_t* sq,
                                                float* lse, int m0, int seqlen_q,
                                                int consumer_warp, int lane) {
    constexpr int kQBlockBytes = T::kBlockM * T::kRowBytes;
    const int row = consumer_warp * 16 + lane / 4;
    const int stage_base = row * T::kRowBytes + ((lane / 4) << 4) + (lane % 4) * 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float inv = finish_row<T>(l_acc, softmax, h, lse, m0, row + h * 8, seqlen_q, lane);
        stage_tiles<T, kQBlockBytes>(o_acc, h, inv, sq, stage_base);
    }
}

// Where the traits stage O (T::kStageO, Sm90Choices::kTmaStore): each consumer warp stages its
// own 16 rows (stage_rows_base), and its lane 0 stores them with one TMA store per 64
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

// T::kStageOHalves (D = 256, where a whole O buffer does not fit): each consumer warp stages its
// 16 rows 128 columns at a time in its own 4 KB (two 64-column blocks of 16 rows, the 128-byte
// swizzle as in stage_rows_base) and its lane 0 stores each half with two TMA stores, the
// second half staged once the first half's store has read the buffer: 64 conflict-free 4-byte
// shared stores a thread and four bulk stores a warp instead of 64 4-byte global stores of 8
// rows x 16 bytes each. consume() waits for the last store before the block exits.
template <typename T>
__device__ __forceinline__ void write_output_tma_halves(float (&o_acc)[T::kDTiles][4],
                                                        const float (&l_acc)[1][4],
                                                        const OnlineSoftmax<1>& softmax,
                                                        const Sm90Smem<T>& sm,
                                                        const CUtensorMap* tma_o, const Tile& tile,
                                                        float* lse, int m0, int seqlen_q,
                                                        int consumer_warp, int lane) {
    constexpr int kBlockBytes = 16 * T::kRowBytes;  // 64 columns of the warp's 16 rows
    constexpr int kHalfTiles = T::kDTiles / 2;      // n8 tiles of 128 columns
    static_assert(T::kRowBytes == 128 && kBlockBytes % 1024 == 0 && kHalfTiles == 16);
    uint8_t* staged = sm.o_halves_generic() + consumer_warp * 2 * kBlockBytes;
    const uint32_t src = sm.o_halves() + consumer_warp * 2 * kBlockBytes;
    // Row lane / 4 (+ 8h) of the warp's 16: r % 8 = lane / 4, the swizzled chunk t ^ r % 8.
    const int row = lane / 4;
    const int stage_base = row * T::kRowBytes + (row << 4) + (lane % 4) * 4;
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
        inv[h] = finish_row<T>(l_acc, softmax, h, lse, m0, consumer_warp * 16 + row + h * 8,
                               seqlen_q, lane);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        // This warp's previous store (the last tile's, or the first half) has read its rows.
        if (lane == 0) sm90::bulk_wait_group_read<0>();
        __syncwarp();
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (half == 0)
                stage_tiles<T, kBlockBytes, 0, kHalfTiles>(o_acc, h, inv[h], staged, stage_base);
            else
                stage_tiles<T, kBlockBytes, kHalfTiles, T::kDTiles>(o_acc, h, inv[h], staged,
                                                                    stage_base);
        }
        sm90::fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
#pragma unroll
            for (int cb = 0; cb < 2; ++cb)
                sm90::tma_store_4d(tma_o, src + cb * kBlockBytes, (2 * half + cb) * 64,
                                   m0 + consumer_warp * 16, tile.head, tile.batch);
            sm90::bulk_commit_group();
        }
    }
}

// The D = 256 kernels under FLASH_SM90_O_STORE=1 (no staging, the tree before h55): O normalized
// by its rows' sums of P (the softmax's, or with T::kRowSumMma the tensor core's in l_acc), lse
// written, and each thread stores its own fragments, 4 bytes each.
template <typename T>
__device__ __forceinline__ void write_output_sm90(float (&o_acc)[T::kDTiles][4],
                                                  const float (&l_acc)[1][4],
                                                  const OnlineSoftmax<1>& softmax,
                                                  typename T::Elem* o, int64_t o_row_stride,
                                                  float* lse, int m0, int seqlen_q,
                                                  int consumer_warp, int lane) {
    using Elem = typename T::Elem;
    static_assert(!T::kStageO && !T::kStageOHalves, "a staged O is stored by TMA");
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
}

}  // namespace flash
