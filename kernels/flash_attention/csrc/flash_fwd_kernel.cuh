// FlashAttention-2 style forward kernel for sm_80+ (mma.sync m16n8k16, ldmatrix, cp.async).
//
// One thread block owns kBlockM query rows of one (batch, head); each of its warps owns 16 or
// 32 of them (FwdConfig). K and V tiles of kBlockN keys stream through shared memory with
// cp.async, in one or two stages. Scores, the online softmax state and the output
// accumulator stay in registers; P is converted to 16 bits in registers and reused as the A
// operand of P.V.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <stdint.h>

#include "flash_api.h"

namespace flash {

// One thread block of 4 warps owns kBlockM = 64 * MTiles query rows. MTiles = 2 gives each warp
// 32 query rows (two m16 tiles) that share every K/V fragment read from shared memory: half
// the shared-memory traffic per mma, paid for with Q re-read from shared memory (no
// registers left to keep it). K and V tiles of BlockN keys pass through Stages (1 or 2)
// shared-memory buffers each: two stages let a tile's loads fly for a whole iteration
// behind one barrier; one stage halves the K/V footprint where shared memory is scarce.
template <int HeadDim, int MTiles, int BlockN, int Stages>
struct FwdConfig {
    // Four warps per block, two blocks per SM: one block's softmax and barriers overlap the
    // other's matrix work (NOTES.md, v2).
    static constexpr int kWarps = 4;
    static constexpr int kMTiles = MTiles;
    static constexpr int kBlockM = 16 * kWarps * MTiles;
    static constexpr int kBlockN = BlockN;
    static constexpr int kStages = Stages;
    static constexpr int kThreads = kWarps * 32;
    static constexpr bool kQInRegs = MTiles == 1;
    // Blocks per SM that the register budget is cut for: two 4-warp blocks at 255 registers
    // (allocated as 256) take exactly the 64K registers of an sm_80/86/89/90 SM.
    static constexpr int kMinBlocks = 2;
    static constexpr int kChunks = HeadDim / 8;  // 16-byte chunks per row
    static constexpr int kSmemElems = kBlockM * HeadDim + 2 * Stages * kBlockN * HeadDim;
    static constexpr int kSmemBytes = kSmemElems * 2;
    static_assert(HeadDim == 64 || HeadDim == 128, "head dim 64 or 128");
    static_assert(Stages == 1 || Stages == 2, "one or two K/V stages");
    static_assert(BlockN % 16 == 0, "K/V tile is whole k16 steps of P.V");
};

// --- small PTX wrappers -------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// src_bytes = 0 zero-fills the 16 bytes: rows past the sequence end read as zeros.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

template <typename Elem>
struct Mma;

template <>
struct Mma<__half> {
    static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
};

template <>
struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
};

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Shared-memory tiles are rows of HeadDim 16-bit values split into 16-byte chunks; chunk c of
// row r is stored at chunk c ^ (r % 8). The 8 rows an ldmatrix phase reads (same logical
// chunk) then fall into 8 different chunks of a 128-byte line: no bank conflicts.
template <int HeadDim>
__device__ __forceinline__ int swizzled(int row, int chunk) {
    return row * HeadDim + ((chunk ^ (row & 7)) << 3);
}

// Copies rows [row0, row0 + Rows) of a (seq, HeadDim) matrix into a swizzled tile; rows at or
// past `rows_valid` become zeros. Thread t copies chunk t % kChunks of rows t / kChunks + i *
// kRowsPerPass: a pass covers a whole number of 8-row swizzle periods, so every pass has the
// same swizzled column and the addresses are one base plus compile-time (shared) or
// once-computed (global) steps. Indexing each copy from scratch cost ~21 instructions per
// cp.async in the main loop, a quarter of its instructions (NOTES.md, v7).
template <int Rows, int HeadDim, int Threads, typename Elem>
__device__ __forceinline__ void load_tile(Elem* tile, const Elem* base, int64_t row_stride,
                                          int row0, int rows_valid, int tid) {
    constexpr int kChunks = HeadDim / 8;
    constexpr int kRowsPerPass = Threads / kChunks;
    static_assert(Threads % kChunks == 0 && kRowsPerPass % 8 == 0,
                  "passes of whole swizzle periods");
    static_assert(Rows % kRowsPerPass == 0, "tile must split evenly over threads");
    const int r = tid / kChunks, c = tid % kChunks;
    // Rows past the end keep their (unread) address: with src_bytes = 0 cp.async reads nothing.
    const Elem* src = base + (int64_t)(row0 + r) * row_stride + c * 8;
    const int64_t step = (int64_t)kRowsPerPass * row_stride;
    const uint32_t dst = smem_u32(tile + swizzled<HeadDim>(r, c));
    const int rows_left = rows_valid - row0 - r;
#pragma unroll
    for (int i = 0; i < Rows / kRowsPerPass; ++i) {
        cp_async_16(dst + i * kRowsPerPass * HeadDim * (int)sizeof(Elem), src,
                    i * kRowsPerPass < rows_left ? 16 : 0);
        src += step;
    }
}

// Flips the sign of every 16-bit element of a shared-memory tile (exact for fp16 and bf16).
template <int Elems, int Threads, typename Elem>
__device__ __forceinline__ void negate_tile(Elem* tile, int tid) {
    static_assert(Elems % (8 * Threads) == 0, "whole 16-byte chunks per thread");
    uint4* chunks = reinterpret_cast<uint4*>(tile);
#pragma unroll
    for (int i = tid; i < Elems / 8; i += Threads) {
        uint4 v = chunks[i];
        v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;
        chunks[i] = v;
    }
}

constexpr float kLn2 = 0.6931471805599453f;

template <typename Elem, int HeadDim, bool Causal, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_fwd_kernel(const FlashFwdParams p) {
    constexpr int Warps = Cfg::kWarps, MTiles = Cfg::kMTiles;
    constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kThreads = Cfg::kThreads;
    constexpr int kNTiles = kBlockN / 8;  // n8 score tiles per m-tile
    constexpr int kDTiles = HeadDim / 8;  // n8 output tiles per m-tile
    constexpr int kKSteps = HeadDim / 16;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
    Elem* sK = sQ + kBlockM * HeadDim;
    Elem* sV = sK + Cfg::kStages * kBlockN * HeadDim;

    // Causal blocks near the end of the sequence carry the most work: start them first.
    const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int head = blockIdx.y, batch = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = m_block * kBlockM;
    // Bottom-right causal alignment: query row i sees keys j <= i + causal_offset.
    const int causal_offset = p.seqlen_k - p.seqlen_q;

    const Elem* q =
        static_cast<const Elem*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
    const Elem* k =
        static_cast<const Elem*>(p.k) + batch * p.k_batch_stride + head * p.k_head_stride;
    const Elem* v =
        static_cast<const Elem*>(p.v) + batch * p.v_batch_stride + head * p.v_head_stride;
    Elem* o = static_cast<Elem*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;

    // Keys at or past n_end are visible to no row of this block: copies zero-fill them
    // rather than read them.
    int n_end = p.seqlen_k;
    if (Causal) n_end = min(n_end, m0 + kBlockM + causal_offset);
    const int n_blocks = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;

    if (n_blocks > 0) {
        load_tile<kBlockM, HeadDim, kThreads>(sQ, q, p.q_row_stride, m0, p.seqlen_q, tid);
        load_tile<kBlockN, HeadDim, kThreads>(sK, k, p.k_row_stride, 0, n_end, tid);
        // One stage: V_0 goes out in the first iteration, once the barrier allows it.
        if (Cfg::kStages == 2)
            load_tile<kBlockN, HeadDim, kThreads>(sV, v, p.v_row_stride, 0, n_end, tid);
        cp_async_commit();
    }

    // Scores are scaled by |scale| * log2(e), kept positive and normal: max(c * s) = c * max(s)
    // holds only for c > 0, and a zero factor would turn masked -inf scores into NaN. A
    // negative scale is folded into Q (its sign bits flipped in shared memory, exactly); a
    // scale under FLT_MIN weighs every score within fp32 rounding of a zero scale's equal
    // weights, which is what the clamp gives.
    const float scale_log2 = fmaxf(fabsf(p.scale) * 1.4426950408889634f, FLT_MIN);
    if (p.scale < 0.f && n_blocks > 0) {
        cp_async_wait<0>();
        __syncthreads();
        negate_tile<kBlockM * HeadDim, kThreads>(sQ, tid);  // the loop's first barrier orders it
    }
    // Warp w owns tile rows (mt * Warps + w) * 16 .. +15 for each m-tile mt; within one, this
    // thread holds rows lane / 4 and lane / 4 + 8 of the mma C layout.
    auto tile_row = [&](int mt) { return (mt * Warps + warp) * 16; };

    uint32_t q_frag[Cfg::kQInRegs ? kKSteps : 1][4];
    float o_acc[MTiles][kDTiles][4];
    // Running max of the scaled scores (log2 units, so exp2 needs no further scaling) and
    // per-thread partial row sums.
    float row_max[MTiles][2], row_sum[MTiles][2];
#pragma unroll
    for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) row_max[mt][h] = -INFINITY, row_sum[mt][h] = 0.f;
#pragma unroll
        for (int t = 0; t < kDTiles; ++t)
#pragma unroll
            for (int c = 0; c < 4; ++c) o_acc[mt][t][c] = 0.f;
    }

    for (int j = 0; j < n_blocks; ++j) {
        const int stage = Cfg::kStages == 2 ? j & 1 : 0;
        const Elem* sKj = sK + stage * kBlockN * HeadDim;
        const Elem* sVj = sV + stage * kBlockN * HeadDim;
        const int n0 = j * kBlockN;

        // Only tile j's group is in flight here. The barrier also means every warp has
        // finished iteration j - 1, so the buffers it read may be refilled.
        cp_async_wait<0>();
        __syncthreads();
        if (Cfg::kQInRegs && j == 0) {
#pragma unroll
            for (int ks = 0; ks < kKSteps; ++ks) {
                const int r = tile_row(0) + (lane & 15);
                ldmatrix_x4(q_frag[Cfg::kQInRegs ? ks : 0],
                            smem_u32(sQ + swizzled<HeadDim>(r, ks * 2 + (lane >> 4))));
            }
        }
        if constexpr (Cfg::kStages == 2) {
            // K and V of tile j + 1 form one group, waited for at the next iteration's top:
            // one barrier per tile instead of two. V's copies are issued after the softmax,
            // where fewer registers are live than during S = Q K^T.
            if (j + 1 < n_blocks)
                load_tile<kBlockN, HeadDim, kThreads>(sK + (stage ^ 1) * kBlockN * HeadDim, k,
                                                      p.k_row_stride, n0 + kBlockN, n_end, tid);
        } else {
            // V_j lands while S = Q K_j^T and the softmax run.
            load_tile<kBlockN, HeadDim, kThreads>(sV, v, p.v_row_stride, n0, n_end, tid);
            cp_async_commit();
        }

        // S = Q K^T for this warp's rows.
        float s[MTiles][kNTiles][4];
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
            for (int t = 0; t < kNTiles; ++t)
#pragma unroll
                for (int c = 0; c < 4; ++c) s[mt][t][c] = 0.f;
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
            uint32_t qa[MTiles][4];
#pragma unroll
            for (int mt = 0; mt < MTiles; ++mt) {
                if constexpr (Cfg::kQInRegs) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) qa[mt][c] = q_frag[ks][c];
                } else {
                    const int r = tile_row(mt) + (lane & 15);
                    ldmatrix_x4(qa[mt], smem_u32(sQ + swizzled<HeadDim>(r, ks * 2 + (lane >> 4))));
                }
            }
#pragma unroll
            for (int t2 = 0; t2 < kNTiles / 2; ++t2) {
                uint32_t b[4];
                const int r = t2 * 16 + (lane & 7) + ((lane >> 4) << 3);
                ldmatrix_x4(b, smem_u32(sKj + swizzled<HeadDim>(r, ks * 2 + ((lane >> 3) & 1))));
#pragma unroll
                for (int mt = 0; mt < MTiles; ++mt) {
                    Mma<Elem>::run(s[mt][2 * t2], qa[mt], b[0], b[1]);
                    Mma<Elem>::run(s[mt][2 * t2 + 1], qa[mt], b[2], b[3]);
                }
            }
        }

        // Mask only the tiles that cross the sequence end or the causal diagonal.
        const bool tail = n0 + kBlockN > p.seqlen_k;
        const bool diagonal = Causal && n0 + kBlockN - 1 > m0 + causal_offset;
        if (tail || diagonal) {
#pragma unroll
            for (int mt = 0; mt < MTiles; ++mt)
#pragma unroll
                for (int t = 0; t < kNTiles; ++t)
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int col = n0 + t * 8 + (lane % 4) * 2 + (c & 1);
                        const int row = m0 + tile_row(mt) + lane / 4 + (c >> 1) * 8;
                        if (col >= p.seqlen_k || (Causal && col > row + causal_offset))
                            s[mt][t][c] = -INFINITY;
                    }
        }

        // Online softmax: rescale the running state to the new row maxima.
#pragma unroll
        for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = -INFINITY;  // this tile's max raw score
#pragma unroll
                for (int t = 0; t < kNTiles; ++t)
                    mx = fmaxf(mx, fmaxf(s[mt][t][2 * h], s[mt][t][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
                mx = fmaxf(row_max[mt][h], mx * scale_log2);  // scaled: scale_log2 > 0
                // A row that has seen only masked keys keeps max -inf: use 0 so no inf - inf.
                const float m_use = mx == -INFINITY ? 0.f : mx;
                // Once the maxima settle (after the first few tiles on most rows) the rescale
                // multiplies by exactly 1: skip it unless a row of these 8 moved. The vote
                // keeps the branch uniform across the warp.
                if (__any_sync(0xffffffff, mx != row_max[mt][h])) {
                    const float correction = fast_exp2(row_max[mt][h] - m_use);
                    row_sum[mt][h] *= correction;
#pragma unroll
                    for (int t = 0; t < kDTiles; ++t) {
                        o_acc[mt][t][2 * h] *= correction;
                        o_acc[mt][t][2 * h + 1] *= correction;
                    }
                }
                row_max[mt][h] = mx;
#pragma unroll
                for (int t = 0; t < kNTiles; ++t) {
#pragma unroll
                    for (int c = 2 * h; c < 2 * h + 2; ++c) {
                        s[mt][t][c] = fast_exp2(fmaf(s[mt][t][c], scale_log2, -m_use));
                        row_sum[mt][h] += s[mt][t][c];
                    }
                }
            }
        }

        if constexpr (Cfg::kStages == 1) {
            cp_async_wait<0>();  // V_j landed
            __syncthreads();     // and every warp is done with K_j: refill it
            if (j + 1 < n_blocks)
                load_tile<kBlockN, HeadDim, kThreads>(sK, k, p.k_row_stride, n0 + kBlockN,
                                                      n_end, tid);
        } else if (j + 1 < n_blocks) {
            load_tile<kBlockN, HeadDim, kThreads>(sV + (stage ^ 1) * kBlockN * HeadDim, v,
                                                  p.v_row_stride, n0 + kBlockN, n_end, tid);
        }
        cp_async_commit();

        // O += P V, with P taken straight from the score registers (C layout == A layout).
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
            uint32_t a[MTiles][4];
#pragma unroll
            for (int mt = 0; mt < MTiles; ++mt) {
                a[mt][0] = Mma<Elem>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = Mma<Elem>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = Mma<Elem>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = Mma<Elem>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int d2 = 0; d2 < kDTiles / 2; ++d2) {
                uint32_t b[4];
                const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                ldmatrix_x4_trans(b, smem_u32(sVj + swizzled<HeadDim>(r, d2 * 2 + (lane >> 4))));
#pragma unroll
                for (int mt = 0; mt < MTiles; ++mt) {
                    Mma<Elem>::run(o_acc[mt][2 * d2], a[mt], b[0], b[1]);
                    Mma<Elem>::run(o_acc[mt][2 * d2 + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
    cp_async_wait<0>();

    // Epilogue: normalize, write the log-sum-exp, stage O through this warp's own rows of the
    // Q tile (no other warp reads them) so that global stores are 16 bytes and coalesced.
    float* lse = p.lse + ((int64_t)batch * p.heads + head) * p.seqlen_q;
#pragma unroll
    for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float sum = row_sum[mt][h];
            sum += __shfl_xor_sync(0xffffffff, sum, 1);
            sum += __shfl_xor_sync(0xffffffff, sum, 2);
            // Rows with no visible key (causal, seqlen_q > seqlen_k) give O = 0, lse = -inf.
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
            const int r = tile_row(mt) + lane / 4 + h * 8;
            if (lane % 4 == 0 && m0 + r < p.seqlen_q)
                lse[m0 + r] = sum > 0.f ? row_max[mt][h] * kLn2 + logf(sum) : -INFINITY;
#pragma unroll
            for (int t = 0; t < kDTiles; ++t) {
                const uint32_t packed =
                    Mma<Elem>::pack(o_acc[mt][t][2 * h] * inv, o_acc[mt][t][2 * h + 1] * inv);
                Elem* dst = sQ + swizzled<HeadDim>(r, t) + (lane % 4) * 2;
                *reinterpret_cast<uint32_t*>(dst) = packed;
            }
        }
    }
    // Each warp reads and overwrites only its own rows of the Q tile: a warp sync suffices.
    __syncwarp();
    constexpr int kChunks = Cfg::kChunks;
#pragma unroll
    for (int mt = 0; mt < MTiles; ++mt) {
#pragma unroll
        for (int i = 0; i < 16 * kChunks / 32; ++i) {
            const int idx = i * 32 + lane;
            const int r = tile_row(mt) + idx / kChunks, c = idx % kChunks;
            if (m0 + r < p.seqlen_q) {
                const uint4 val = *reinterpret_cast<const uint4*>(sQ + swizzled<HeadDim>(r, c));
                *reinterpret_cast<uint4*>(o + (int64_t)(m0 + r) * p.o_row_stride + c * 8) = val;
            }
        }
    }
}

}  // namespace flash
