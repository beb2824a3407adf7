// The Hopper kernel's epilogue: O normalized by its rows' sums of P, lse written, O stored (by
// TMA from a staging buffer where the traits stage O, else from registers).
#pragma once

#include <stdint.h>
#include "flash_fwd_sm90_schedule.cuh"
#include "sm90_utils.h"
#include "softmax.h"
#include "utils.h"

namespace flash {

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

// Without an O buffer (D = 256: T::kStageO false): O normalized by its rows' sums of P (the
// softmax's, or with T::kRowSumMma the tensor core's in l_acc), lse written, and each thread
// stores its own fragments, 4 bytes each.
template <typename T>
__device__ __forceinline__ void write_output_sm90(float (&o_acc)[T::kDTiles][4],
                                                  const float (&l_acc)[1][4],
                                                  const OnlineSoftmax<1>& softmax,
                                                  typename T::Elem* o, int64_t o_row_stride,
                                                  float* lse, int m0, int seqlen_q,
                                                  int consumer_warp, int lane) {
    using Elem = typename T::Elem;
    static_assert(!T::kStageO, "a staged O is stored by write_output_tma");
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
