// FlashAttention-2 style forward kernel for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async).
//
// One thread block owns kBlockM query rows of one (batch, head); each of its warps owns 16 or
// 32 of them (FwdTraits). K and V tiles of kBlockN keys stream through shared memory with
// cp.async, in one or two stages, or as column halves through two half-tile buffers (split-D).
// Scores, the online softmax state and the output accumulator stay in registers; P is
// converted to 16 bits in registers and reused as the A operand of P.V.
#pragma once

#include <stdint.h>

#include "block_order.h"
#include "flash_api.h"
#include "kernel_params.h"
#include "kernel_traits.h"
#include "mask.h"
#include "softmax.h"
#include "switches.h"
#include "utils.h"

namespace flash {

// S = Q K_j^T for this warp's rows. Q comes from registers (one m-tile) or shared memory.
// Split-D (traits): k-steps [Ks0, KsEnd) against a K buffer holding those columns alone, S
// zeroed by the first half only.
template <typename T, int Ks0 = 0, int KsEnd = T::kKSteps>
__device__ __forceinline__ void qk_gemm(float (&s)[T::kMTiles][T::kNTiles][4],
                                        const typename T::Elem* sQ, const typename T::Elem* sKj,
                                        const typename T::QFrag& q_frag,
                                        int warp, int lane) {
    using Elem = typename T::Elem;
    if constexpr (Ks0 == 0) {
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
            for (int t = 0; t < T::kNTiles; ++t)
#pragma unroll
                for (int c = 0; c < 4; ++c) s[mt][t][c] = 0.f;
    }
#pragma unroll
    for (int ks = Ks0; ks < KsEnd; ++ks) {
        uint32_t qa[T::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt) {
            if constexpr (T::kQInRegs) {
#pragma unroll
                for (int c = 0; c < 4; ++c) qa[mt][c] = q_frag[mt][ks][c];
            } else {
                const int r = T::tile_row(mt, warp) + (lane & 15);
                ldmatrix_x4(qa[mt],
                            smem_u32(sQ + swizzled<T::kHeadDim>(r, ks * 2 + (lane >> 4))));
            }
        }
#pragma unroll
        for (int t2 = 0; t2 < T::kNTiles / 2; ++t2) {
            uint32_t b[4];
            const int r = t2 * 16 + (lane & 7) + ((lane >> 4) << 3);
            ldmatrix_x4(b, smem_u32(sKj + swizzled<T::kKVDim>(
                               r, (ks - Ks0) * 2 + ((lane >> 3) & 1))));
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt) {
                Mma<Elem>::run(s[mt][2 * t2], qa[mt], b[0], b[1]);
                Mma<Elem>::run(s[mt][2 * t2 + 1], qa[mt], b[2], b[3]);
            }
        }
    }
}

// This warp's rows of the Q tile as mma A fragments (traits: kQInRegs).
template <typename T>
__device__ __forceinline__ void load_q_frag(typename T::QFrag& q_frag, const typename T::Elem* sQ,
                                            int warp, int lane) {
#pragma unroll
    for (int mt = 0; mt < (T::kQInRegs ? T::kMTiles : 0); ++mt)
#pragma unroll
        for (int ks = 0; ks < T::kKSteps; ++ks) {
            const int r = T::tile_row(mt, warp) + (lane & 15);
            ldmatrix_x4(q_frag[mt][ks],
                        smem_u32(sQ + swizzled<T::kHeadDim>(r, ks * 2 + (lane >> 4))));
        }
}

// O += P V_j, with P taken straight from the score registers (C layout == A layout).
// Split-D (traits): output tile pairs [D0, DEnd) against a V buffer holding those columns.
template <typename T, int D0 = 0, int DEnd = T::kDTiles / 2>
__device__ __forceinline__ void pv_gemm(float (&o_acc)[T::kMTiles][T::kDTiles][4],
                                        const float (&p)[T::kMTiles][T::kNTiles][4],
                                        const typename T::Elem* sVj, int lane) {
    using Elem = typename T::Elem;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
        uint32_t a[T::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt) {
            a[mt][0] = Mma<Elem>::pack(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            a[mt][1] = Mma<Elem>::pack(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            a[mt][2] = Mma<Elem>::pack(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            a[mt][3] = Mma<Elem>::pack(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int d2 = D0; d2 < DEnd; ++d2) {
            uint32_t b[4];
            const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
            ldmatrix_x4_trans(b, smem_u32(sVj + swizzled<T::kKVDim>(
                                     r, (d2 - D0) * 2 + (lane >> 4))));
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt) {
                Mma<Elem>::run(o_acc[mt][2 * d2], a[mt], b[0], b[1]);
                Mma<Elem>::run(o_acc[mt][2 * d2 + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// Normalizes O, writes the log-sum-exp, and stages O through this warp's own rows of the Q
// tile (no other warp reads them) so that global stores are 16 bytes and coalesced.
template <typename T>
__device__ __forceinline__ void write_output(float (&o_acc)[T::kMTiles][T::kDTiles][4],
                                             const OnlineSoftmax<T::kMTiles>& softmax,
                                             typename T::Elem* sQ, typename T::Elem* o,
                                             int64_t o_row_stride, float* lse, int m0,
                                             int seqlen_q, int warp, int lane) {
    using Elem = typename T::Elem;
    // Every row this thread stages is lane / 4 past a multiple of 8, so its swizzle (utils.h)
    // is the same: output tile t lands in chunk t ^ (lane / 4). Eight chunk addresses,
    // computed once, serve all 2 * kMTiles rows with compile-time offsets. Indexing each
    // store from scratch made most of the epilogue's address arithmetic (NOTES.md, v12).
    Elem* const row_base = sQ + (T::tile_row(0, warp) + lane / 4) * T::kHeadDim + (lane % 4) * 2;
    Elem* chunk[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) chunk[c] = row_base + ((c ^ (lane / 4)) << 3);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float sum = softmax.total(mt, h);
            // Rows with no visible key (causal, seqlen_q > seqlen_k) give O = 0, lse = -inf.
            const float inv = sum > 0.f ? fast_rcp(sum) : 0.f;
            const int r = T::tile_row(mt, warp) + lane / 4 + h * 8;
            if (lane % 4 == 0 && m0 + r < seqlen_q) lse[m0 + r] = softmax.lse(mt, h, sum);
            constexpr int kRowStep = 16 * T::kWarps * T::kHeadDim;  // between m-tiles
#pragma unroll
            for (int t = 0; t < T::kDTiles; ++t) {
                const uint32_t packed =
                    Mma<Elem>::pack(o_acc[mt][t][2 * h] * inv, o_acc[mt][t][2 * h + 1] * inv);
                Elem* dst = chunk[t % 8] + mt * kRowStep + h * 8 * T::kHeadDim + (t / 8) * 64;
                *reinterpret_cast<uint32_t*>(dst) = packed;
            }
        }
    }
    // Each warp reads and overwrites only its own rows of the Q tile: a warp sync suffices.
    __syncwarp();
    if constexpr (T::kHeadDim >= 128) {
        // Lane l copies chunk c = l % kChunks of rows q + i * kRowsPerStep (q = l / kChunks)
        // of its warp's slice of each m-tile. kRowsPerStep is a power of two and q is below
        // it, so the swizzle's row bits are q ^ (i * kRowsPerStep) % 8: the chunk is (c ^ q)
        // ^ a compile-time constant, and the global address steps by a fixed number of rows.
        // Indexing each copy from scratch took ~20 instructions per 16 bytes: 839 -> 583
        // instructions after the last mma of the split-D kernel (NOTES.md, v14).
        constexpr int kRowsPerStep = 32 / T::kChunks;
        static_assert(32 % T::kChunks == 0 && kRowsPerStep <= 8, "whole rows per warp step");
        const int q = lane / T::kChunks, c = lane % T::kChunks;
        const int cq = c ^ q;
        const bool whole_block = m0 + T::kBlockM <= seqlen_q;
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt) {
            const int row0 = T::tile_row(mt, warp) + q;
            const Elem* src = sQ + row0 * T::kHeadDim;
            Elem* dst = o + (int64_t)(m0 + row0) * o_row_stride + c * 8;
#pragma unroll
            for (int i = 0; i < 16 / kRowsPerStep; ++i) {
                const int chunk = cq ^ ((i * kRowsPerStep) & 7);
                if (whole_block || m0 + row0 + i * kRowsPerStep < seqlen_q)
                    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(
                        src + i * kRowsPerStep * T::kHeadDim + chunk * 8);
                dst += kRowsPerStep * o_row_stride;
            }
        }
    } else {
        // D=64 keeps the copy indexed from scratch: with the stepped copy above, its kernels'
        // loops were scheduled anew and ran ~1 % slower at S >= 2048 (NOTES.md, v14).
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
            for (int i = 0; i < 16 * T::kChunks / 32; ++i) {
                const int idx = i * 32 + lane;
                const int r = T::tile_row(mt, warp) + idx / T::kChunks, c = idx % T::kChunks;
                if (m0 + r < seqlen_q) {
                    const uint4 val =
                        *reinterpret_cast<const uint4*>(sQ + swizzled<T::kHeadDim>(r, c));
                    *reinterpret_cast<uint4*>(o + (int64_t)(m0 + r) * o_row_stride + c * 8) =
                        val;
                }
            }
        }
    }
}

// Split-D copies ask L2 for the 256 bytes around each 16-byte copy: a K_lo (V_lo) row's copy
// then brings its K_hi (V_hi) half from DRAM too, and the copy of that half a quarter tile
// later finds it in L2 (NOTES.md, v14).
template <typename T>
constexpr int kL2PrefetchBytes = T::kSplitD ? 256 : 0;

// The block's shared memory: the Q tile, then the K and V buffers (a Q held in registers may
// be staged in the K/V buffers, traits).
template <typename T>
struct SharedTiles {
    using Elem = typename T::Elem;
    static constexpr int kTile = T::kBlockN * T::kKVDim;  // one K or V buffer of one stage
    Elem* q;
    Elem* k;
    Elem* v;
    __device__ __forceinline__ explicit SharedTiles(unsigned char* raw) {
        q = reinterpret_cast<Elem*>(raw);
        k = T::kQStagedInKV ? q : q + T::kBlockM * T::kHeadDim;
        v = k + T::kStages * kTile;
    }
};

// What one block computes: its query rows of one (batch, head), the global tiles it reads and
// writes, and the key tiles it visits, in which order.
template <typename T>
struct BlockInfo {
    using Elem = typename T::Elem;
    int m_block, m0, head, batch;
    // Bottom-right causal alignment: query row i sees keys j <= i + causal_offset.
    int causal_offset;
    // Keys at or past n_end are visible to no row of this block: copies zero-fill them rather
    // than read them. n_blocks key tiles, the first taken being `first` (split-D, below).
    int n_end, n_blocks, first;
    const Elem* q;
    const Elem* k;
    const Elem* v;
    Elem* o;
};

template <typename T, bool Causal>
__device__ __forceinline__ BlockInfo<T> block_info(const FwdKernelParams& p,
                                                   const BlockCoord& coord, int m_blocks) {
    using Elem = typename T::Elem;
    BlockInfo<T> b;
    b.m_block = coord.m_block, b.head = coord.head, b.batch = coord.batch;
    b.m0 = b.m_block * T::kBlockM;
    b.causal_offset = p.seqlen_k - p.seqlen_q;

    b.q = static_cast<const Elem*>(p.q) + b.batch * p.q_batch_stride + b.head * p.q_head_stride;
    // Grouped-query attention: consecutive query heads share a k/v head (flash_api.h), so the
    // blocks running at once, query block and then head fastest, share it in L2.
    const int kv_head = p.kv_heads.kv_head(b.head);
    b.k = static_cast<const Elem*>(p.k) + b.batch * p.k_batch_stride + kv_head * p.k_head_stride;
    b.v = static_cast<const Elem*>(p.v) + b.batch * p.v_batch_stride + kv_head * p.v_head_stride;
    b.o = static_cast<Elem*>(p.o) + b.batch * p.o_batch_stride + b.head * p.o_head_stride;

    b.n_end = p.seqlen_k;
    if (Causal) b.n_end = min(b.n_end, b.m0 + T::kBlockM + b.causal_offset);
    b.n_blocks = b.n_end > 0 ? (b.n_end + T::kBlockN - 1) / T::kBlockN : 0;

    // Split-D, non-causal: this block takes its key tiles in the order first, first + 1, ...,
    // wrapping around, the blocks of one head starting in pairs spread evenly over the keys.
    // Blocks of a head run in lock step. Taken in one order, all of them wait for each tile's
    // first read from DRAM, a quarter tile's lead being too short for it. Spread, each tile
    // is read from DRAM once, at the start of the block that begins there, and the others
    // find it in L2; but one block per start (v12-v15) made every block of a wave read its
    // first two tiles at once, a head's whole K/V in two tiles' time. In pairs, a pair shares
    // each read and a head's reads take four tiles' time: +1.0 % at 1024 keys, +1.2 % at 4096
    // and +1.6-1.9 % at 8192-16384, where launches had kept the order (medians of builds
    // paired in one process, NOTES.md, v16).
    // Causal launches and the other shapes take the keys in order: without the spread copy of
    // the loop, the causal split-D kernel's own loop ran 2-3 % faster at S >= 4096 (44/52
    // bytes of ptxas spills instead of 84/108; NOTES.md, v14).
    // (A float product: an integer division costs ~150 instructions per block.)
    constexpr int kBlocksPerStart = FLASH_SPREAD_GROUP > 0 ? FLASH_SPREAD_GROUP : 2;
    const bool spread = T::kSplitD && !Causal && b.n_blocks > 0;
    b.first = spread ? min((int)(__fdividef(b.m_block / kBlocksPerStart * kBlocksPerStart,
                                            m_blocks) *
                                 b.n_blocks),
                           b.n_blocks - 1)
                     : 0;
    return b;
}

// Starts the block's copies: Q (into registers first where it is staged in the K/V buffers),
// then the first K tile (split-D: its first half) and, with two stages, V_0; folds a negative
// scale's sign into Q (softmax.h).
template <typename T>
__device__ __forceinline__ void load_prologue(const FwdKernelParams& p, const BlockInfo<T>& b,
                                              const SharedTiles<T>& smem,
                                              typename T::QFrag& q_frag, int tid, int warp,
                                              int lane) {
    constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kHeadDim = T::kHeadDim;
    constexpr int kThreads = T::kThreads, kL2Bytes = kL2PrefetchBytes<T>;
    if (b.n_blocks > 0) {
        load_tile<kBlockM, kHeadDim, kThreads, kL2Bytes>(smem.q, b.q, p.q_row_stride, b.m0,
                                                         p.seqlen_q, tid);
        if constexpr (T::kQStagedInKV) {
            // Q into registers first: only then may K and V overwrite its staging area.
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
            if (p.scale < 0.f) {  // fold the sign into Q (softmax.h)
                negate_tile<kBlockM * kHeadDim, kThreads>(smem.q, tid);
                __syncthreads();
            }
            load_q_frag<T>(q_frag, smem.q, warp, lane);
            __syncthreads();
        }
        // Split-D: the first tile's first half (tile `first`, below).
        load_tile<kBlockN, T::kKVDim, kThreads, kL2Bytes>(smem.k, b.k, p.k_row_stride,
                                                          b.first * kBlockN, b.n_end, tid);
        // One stage: V_0 goes out in the first iteration, once the barrier allows it.
        if (T::kStages == 2)
            load_tile<kBlockN, kHeadDim, kThreads>(smem.v, b.v, p.v_row_stride, 0, b.n_end, tid);
        cp_async_commit();
    }

    if (!T::kQStagedInKV && p.scale < 0.f && b.n_blocks > 0) {  // fold the sign into Q
        cp_async_wait<0>();
        __syncthreads();
        negate_tile<kBlockM * kHeadDim, kThreads>(smem.q, tid);  // the loop's first barrier orders it
    }
}

// The split-D main loop (traits): half-tiles take turns in two buffers: K_lo in sK, K_hi in
// sV, V_lo in sK, V_hi in sV. Each barrier means the half just waited for landed and every
// warp is done with the other buffer, so the next half goes into it and lands while this one
// is used. The always-true tests keep ptxas from spreading the copies over the matrix loops
// (see the one-stage V copy of staged_loop).
// Two copies of the loop: in order (j * kBlockN, as before the spread) and spread
// (non-causal; in causal kernels `first` is 0 and the spread copy compiles away). One loop
// serving both, with the wrap-around in it, ran 1.7 % slower at 16384 keys (ncu, v12): this
// loop's schedule at 255 registers moves with any change to it.
template <typename T, bool Causal, bool Spread>
__device__ __forceinline__ void split_d_loop(const FwdKernelParams& p, const BlockInfo<T>& b,
                                             const SharedTiles<T>& smem,
                                             const typename T::QFrag& q_frag,
                                             float (&o_acc)[T::kMTiles][T::kDTiles][4],
                                             OnlineSoftmax<T::kMTiles>& softmax,
                                             float scale_log2, int tid, int warp, int lane) {
    constexpr int kBlockN = T::kBlockN, kThreads = T::kThreads, kHalf = T::kKVDim;
    constexpr int kL2Bytes = kL2PrefetchBytes<T>;
    const int n_blocks = b.n_blocks, n_end = b.n_end;
    int tile = b.first;
    for (int j = 0; j < n_blocks; ++j) {
        int n0 = j * kBlockN, next = n0 + kBlockN;  // next: loaded during this tile
        if constexpr (Spread) {
            n0 = tile * kBlockN;
            tile = tile + 1 == n_blocks ? 0 : tile + 1;
            next = tile * kBlockN;
        }
        float s[T::kMTiles][T::kNTiles][4];
        cp_async_wait<0>();
        __syncthreads();
        if (n0 < n_end)
            load_tile<kBlockN, kHalf, kThreads, kL2Bytes>(smem.v, b.k + kHalf, p.k_row_stride,
                                                          n0, n_end, tid);
        cp_async_commit();
        qk_gemm<T, 0, T::kKSteps / 2>(s, smem.q, smem.k, q_frag, warp, lane);
        cp_async_wait<0>();
        __syncthreads();
        if (n0 < n_end)
            load_tile<kBlockN, kHalf, kThreads, kL2Bytes>(smem.k, b.v, p.v_row_stride, n0,
                                                          n_end, tid);
        cp_async_commit();
        qk_gemm<T, T::kKSteps / 2, T::kKSteps>(s, smem.q, smem.v, q_frag, warp, lane);
        const bool tail = n0 + kBlockN > p.seqlen_k;
        const bool diagonal = Causal && n0 + kBlockN - 1 > b.m0 + b.causal_offset;
        if (tail || diagonal)
            mask_scores<T, Causal>(s, b.m0, n0, p.seqlen_k, b.causal_offset, warp, lane);
        // Lazy rescaling (softmax.h): the vote of update() fires on nearly every tile of a
        // short block, whose row maxima still climb (NOTES.md, v11).
        softmax.update_lazy(s, o_acc, scale_log2);
        cp_async_wait<0>();
        __syncthreads();
        if (n0 < n_end)
            load_tile<kBlockN, kHalf, kThreads, kL2Bytes>(smem.v, b.v + kHalf, p.v_row_stride,
                                                          n0, n_end, tid);
        cp_async_commit();
        pv_gemm<T, 0, T::kDTiles / 4>(o_acc, s, smem.k, lane);
        cp_async_wait<0>();
        __syncthreads();
        if (j + 1 < n_blocks)
            load_tile<kBlockN, kHalf, kThreads, kL2Bytes>(smem.k, b.k, p.k_row_stride, next,
                                                          n_end, tid);
        cp_async_commit();
        pv_gemm<T, T::kDTiles / 4, T::kDTiles / 2>(o_acc, s, smem.v, lane);
    }
}

// The main loop of the other shapes: whole K and V tiles through one or two stages.
template <typename T, bool Causal>
__device__ __forceinline__ void staged_loop(const FwdKernelParams& p, const BlockInfo<T>& b,
                                            const SharedTiles<T>& smem,
                                            typename T::QFrag& q_frag,
                                            float (&o_acc)[T::kMTiles][T::kDTiles][4],
                                            OnlineSoftmax<T::kMTiles>& softmax, float scale_log2,
                                            int tid, int warp, int lane) {
    using Elem = typename T::Elem;
    constexpr int kBlockN = T::kBlockN, kHeadDim = T::kHeadDim, kThreads = T::kThreads;
    constexpr int kTile = SharedTiles<T>::kTile;
    const int n_blocks = b.n_blocks, n_end = b.n_end;
    for (int j = 0; j < n_blocks; ++j) {
        const int stage = T::kStages == 2 ? j & 1 : 0;
        const Elem* sKj = smem.k + stage * kTile;
        const Elem* sVj = smem.v + stage * kTile;
        const int n0 = j * kBlockN;

        // Only tile j's group is in flight here. The barrier also means every warp has
        // finished iteration j - 1, so the buffers it read may be refilled.
        cp_async_wait<0>();
        __syncthreads();
        if (T::kQInRegs && !T::kQStagedInKV && j == 0) load_q_frag<T>(q_frag, smem.q, warp, lane);
        if constexpr (T::kStages == 2) {
            // K and V of tile j + 1 form one group, waited for at the next iteration's top:
            // one barrier per tile instead of two. V's copies are issued after the softmax,
            // where fewer registers are live than during S = Q K^T.
            if (j + 1 < n_blocks)
                load_tile<kBlockN, kHeadDim, kThreads>(smem.k + (stage ^ 1) * kBlockN * kHeadDim,
                                                       b.k, p.k_row_stride, n0 + kBlockN, n_end,
                                                       tid);
        } else {
            // V_j lands while S = Q K_j^T and the softmax run. The test is always true, but a
            // branch keeps ptxas from spreading the copies' address arithmetic over the
            // matrix loop (unconditional copies spilled 64-164 B on sm_90, NOTES.md v9).
            if (n0 < n_end)
                load_tile<kBlockN, kHeadDim, kThreads>(smem.v, b.v, p.v_row_stride, n0, n_end,
                                                       tid);
            cp_async_commit();
        }

        float s[T::kMTiles][T::kNTiles][4];
        qk_gemm<T>(s, smem.q, sKj, q_frag, warp, lane);
        // Mask only the tiles that cross the sequence end or the causal diagonal.
        const bool tail = n0 + kBlockN > p.seqlen_k;
        const bool diagonal = Causal && n0 + kBlockN - 1 > b.m0 + b.causal_offset;
        if (tail || diagonal)
            mask_scores<T, Causal>(s, b.m0, n0, p.seqlen_k, b.causal_offset, warp, lane);
        softmax.update(s, o_acc, scale_log2);

        if constexpr (T::kStages == 1) {
            cp_async_wait<0>();  // V_j landed
            __syncthreads();     // and every warp is done with K_j: refill it
            if (j + 1 < n_blocks)
                load_tile<kBlockN, kHeadDim, kThreads>(smem.k, b.k, p.k_row_stride, n0 + kBlockN,
                                                       n_end, tid);
        } else if (j + 1 < n_blocks) {
            load_tile<kBlockN, kHeadDim, kThreads>(smem.v + (stage ^ 1) * kBlockN * kHeadDim,
                                                   b.v, p.v_row_stride, n0 + kBlockN, n_end, tid);
        }
        cp_async_commit();
        pv_gemm<T>(o_acc, s, sVj, lane);
    }
}

// One block: find its work, start its copies, run the main loop over its key tiles, write O
// and the log-sum-exp.
template <typename T, bool Causal>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    flash_fwd_kernel(const FwdKernelParams p, const CausalOrder order) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const SharedTiles<T> smem(smem_raw);

    // Non-causal blocks are all alike: a (query block, head, batch) grid, query block fastest
    // so that the blocks running at once share their heads' K/V in L2. Causal blocks differ
    // in length: the grid and order of block_order.h. A causal block's head and batch come
    // from a division, so ptxas no longer derives the K/V pointers from blockIdx in uniform
    // registers: it keeps them in local memory, one load per half-tile copy (split-D 68-84 B
    // of "spills"); per head, the old order, this code measured as v12's (NOTES.md, v13).
    const int m_blocks = Causal ? order.m_blocks : gridDim.x;
    const BlockCoord coord =
        Causal ? causal_block_at(order, blockIdx.x, blockIdx.y, blockIdx.z)
               : BlockCoord{(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, false};
    if (coord.idle) return;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const BlockInfo<T> b = block_info<T, Causal>(p, coord, m_blocks);

    const float scale_log2 = score_scale_log2(p.scale);
    typename T::QFrag q_frag;
    load_prologue<T>(p, b, smem, q_frag, tid, warp, lane);

    float o_acc[T::kMTiles][T::kDTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int t = 0; t < T::kDTiles; ++t)
#pragma unroll
            for (int c = 0; c < 4; ++c) o_acc[mt][t][c] = 0.f;
    OnlineSoftmax<T::kMTiles> softmax;

    if constexpr (T::kSplitD) {
        if (b.first > 0)
            split_d_loop<T, Causal, true>(p, b, smem, q_frag, o_acc, softmax, scale_log2, tid,
                                          warp, lane);
        else
            split_d_loop<T, Causal, false>(p, b, smem, q_frag, o_acc, softmax, scale_log2, tid,
                                           warp, lane);
    } else {
        staged_loop<T, Causal>(p, b, smem, q_frag, o_acc, softmax, scale_log2, tid, warp, lane);
    }
    cp_async_wait<0>();
    // The output is staged where Q was; when that is the K/V buffers, other warps may still
    // be reading the last tile.
    if (T::kQStagedInKV) __syncthreads();

    float* lse = p.lse + ((int64_t)b.batch * p.heads + b.head) * p.seqlen_q;
    write_output<T>(o_acc, softmax, smem.q, b.o, p.o_row_stride, lse, b.m0, p.seqlen_q, warp,
                    lane);
}

}  // namespace flash
