// The Hopper kernel's epilogue: O normalized by its rows' sums of P, lse written, O stored (by
// TMA from a staging buffer where the traits stage O, else from registers).
#pragma once

#include <stdint.h>
#include "flash_fwd_sm90_schedule.cuh"
#include "sm90_utils.h"
#include "softmax.h"
#include "utils.h"

namespace flash {

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

}  // namespace flash
