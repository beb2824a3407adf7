// Compile-time shape of one kernel instance, sm_80 (FwdTraits) or Hopper (Sm90Traits):
// everything a tile needs to know.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

#include "switches.h"

namespace flash {

// One thread block of Warps warps owns kBlockM = 16 * Warps * MTiles query rows. MTiles = 2
// gives each warp 32 query rows (two m16 tiles) that share every K/V fragment read from shared
// memory: half the shared-memory traffic per mma, paid for with Q re-read from shared memory
// (no registers left to keep it); with MTiles = 1 Q stays in registers. K and V tiles of
// BlockN keys pass through Stages (1 or 2) shared-memory buffers each: two stages let a
// tile's loads fly for a whole iteration behind one barrier; one stage halves the K/V
// footprint where shared memory is scarce.
// Warps = 4 runs two blocks per SM (MinBlocks = 2, 255 registers): one block's softmax and
// barriers overlap the other's matrix work (NOTES.md, v2), or three (MinBlocks = 3, 168
// registers). Warps = 8 is one block per SM whose 8 warps share each K/V tile: 32-row warps and
// 64-key tiles at D=128 in 96 KB (NOTES.md, v9; SplitD below does it in two 48 KB blocks).
// QStaged (Q in registers): the Q tile is needed only until the fragments are loaded, so it is
// staged in the K/V buffers and costs no shared memory of its own.
// SplitD: K and V tiles travel as halves of HeadDim / 2 columns (K_lo, K_hi, V_lo, V_hi)
// through two half-tile buffers, each half loading while the one before it is used: a
// 128-row Q tile and 64-key tiles at D=128 in 48 KB, two blocks per 100 KB SM (NOTES.md, v10).
// HeadDim = 256: one m-tile per warp with Q read from shared memory (its fragments would take
// 64 registers beside O's 128), FA2's sm86/sm89 shape (NOTES.md, 2026-11-25).
template <typename Elem_, int HeadDim, int MTiles, int BlockN, int Stages, int Warps = 4,
          int MinBlocks = 256 / (Warps * 32), bool QStaged = false, bool SplitD = false>
struct FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = HeadDim;
    static constexpr int kWarps = Warps;
    static constexpr int kMTiles = MTiles;
    static constexpr int kBlockM = 16 * kWarps * MTiles;
    static constexpr int kBlockN = BlockN;
    static constexpr int kStages = Stages;
    static constexpr int kThreads = kWarps * 32;
    static constexpr bool kQInRegs = MTiles == 1 && HeadDim <= 128;
    static constexpr bool kQStagedInKV = QStaged;
    static constexpr bool kSplitD = SplitD;
    // Columns of one shared-memory K/V buffer row.
    static constexpr int kKVDim = SplitD ? HeadDim / 2 : HeadDim;
    // This warp's Q as mma A fragments, per m-tile and k-step (a placeholder when Q stays in
    // shared memory).
    using QFrag = uint32_t[kQInRegs ? MTiles : 1][kQInRegs ? HeadDim / 16 : 1][4];
    // Blocks per SM that the register budget is cut for: 255 registers (allocated as 256) for
    // 256 threads take exactly the 64K registers of an sm_80/86/89/90 SM; three blocks of 128
    // threads get 168.
    static constexpr int kMinBlocks = MinBlocks;
    static constexpr int kChunks = HeadDim / 8;   // 16-byte chunks per row
    static constexpr int kNTiles = BlockN / 8;    // n8 score tiles per m-tile
    static constexpr int kDTiles = HeadDim / 8;   // n8 output tiles per m-tile
    static constexpr int kKSteps = HeadDim / 16;  // k16 steps of S = Q K^T
    static constexpr int kQElems = kBlockM * HeadDim;
    static constexpr int kKVElems = 2 * Stages * kBlockN * kKVDim;
    static constexpr int kSmemElems =
        QStaged ? (kQElems > kKVElems ? kQElems : kKVElems) : kQElems + kKVElems;
    static constexpr int kSmemBytes = kSmemElems * 2;
    static_assert(sizeof(Elem) == 2, "16-bit elements");
    static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256, "head dim 64, 128 or 256");
    static_assert(Stages == 1 || Stages == 2, "one or two K/V stages");
    static_assert(BlockN % 16 == 0, "K/V tile is whole k16 steps of P.V");
    static_assert(Warps == 4 || Warps == 8, "4 warps (2 or 3 blocks per SM) or 8 (1 block)");
    static_assert(!QStaged || kQInRegs, "only a Q held in registers can be staged");
    static_assert(!SplitD || (Stages == 1 && !QStaged && !kQInRegs), "split-D: one stage, Q in smem");

    // Warp w owns tile rows (mt * kWarps + w) * 16 .. +15 of m-tile mt.
    static __device__ __forceinline__ int tile_row(int mt, int warp) {
        return (mt * kWarps + warp) * 16;
    }
};

// The Hopper kernel (flash_fwd_kernel_sm90.cuh): a producer warpgroup and ConsumerWarpgroups
// (2 or 3) consumer warpgroups of 64 query rows each; K and V tiles of BlockN keys through a
// ring of Stages buffers; Q (and, where it fits, O's staging buffer) beside them. Three
// consumers (a 192-row block, FlashAttention-3's shape for D = 64) get 160 registers each
// instead of 240: S (64) + P (32) + O (32) fit that at D = 64 (NOTES.md, h4). QStages Q
// buffers (1 or 2): with two, the next tile's Q loads while the current tile still reads its
// own (NOTES.md, h16).
// Solo: one warpgroup and no producer warpgroup (its thread 0 issues the loads), one tile per
// block, O staged in Q's buffer: 73 KB and 155 registers, three blocks an SM, as cuDNN's
// 64 x 128 one-warpgroup kernels (flash_fwd_sm90_solo_kernel; NOTES.md, h43).
template <typename Elem_, int HeadDim, int BlockN, int Stages, int ConsumerWarpgroups = 2,
          int QStages = 1, bool Solo = false>
struct Sm90Traits {
    using Elem = Elem_;
    static constexpr int kHeadDim = HeadDim;
    static constexpr bool kSolo = Solo;
    static constexpr int kConsumerWarpgroups = Solo ? 1 : ConsumerWarpgroups;
    static constexpr int kThreads = 128 * (kConsumerWarpgroups + (Solo ? 0 : 1));  // + producer
    static constexpr int kBlocksPerSm = Solo ? 3 : 1;
    static constexpr int kBlockM = 64 * kConsumerWarpgroups;
    static constexpr int kBlockN = BlockN;
    static constexpr int kStages = Stages;
    static constexpr int kQStages = QStages;
    // mask.h and softmax.h see each consumer warp as the owner of one m16 tile.
    static constexpr int kMTiles = 1;
    static constexpr int kWarps = 4 * kConsumerWarpgroups;  // consumer warps
    static constexpr int kNTiles = BlockN / 8;
    static constexpr int kDTiles = HeadDim / 8;
    static constexpr int kKSteps = HeadDim / 16;
    // Tiles are stored as column blocks of 64 elements (128-byte rows, TMA's 128-byte swizzle
    // limit): a row r, column c element lives in block c / 64 at row r.
    static constexpr int kColBlocks = HeadDim / 64;
    static constexpr int kRowBytes = 128;
    static constexpr int kQBytes = kBlockM * HeadDim * 2;
    static constexpr int kTileBytes = BlockN * HeadDim * 2;  // one K or V tile
    // O leaves through shared memory (each warp's rows by TMA stores, write_output_tma), in a
    // buffer of its own where one fits: at D = 256 Q alone takes 64 KB and the two-stage ring
    // 128 KB, so O goes in halves (kStageOHalves).
    static constexpr bool kStageO = HeadDim <= 128;
    static constexpr int kQOBytes = Solo ? kQBytes : (QStages + (kStageO ? 1 : 0)) * kQBytes;
    // Without an O buffer: each consumer warp stages its 16 rows 128 columns at a time in 4 KB
    // of its own after the ring (32 KB for 8 warps: D = 256's block then takes 225 KB, 226 KB
    // with its barriers, of the 227 KB a block may have), stored by TMA
    // (write_output_tma_halves): 1.12-1.17x the threads' 4-byte global stores at D = 256 1024,
    // 1.07-1.14x at 2048, 1.01-1.02x at 16k (NOTES.md, h55; FLASH_SM90_O_STORE=1 the stores
    // from registers).
    static constexpr bool kStageOHalves = !kStageO && !Solo && FLASH_SM90_O_STORE == 0;
    static constexpr int kOHalvesBytes = kStageOHalves ? kWarps * 16 * 128 * 2 : 0;
    // Each row's sum of probabilities: at D = 64 by the tensor core, P V as m64n72k16 whose 8
    // extra columns read a 2 KB block of ones (16 keys x 128 bytes, after the ring), the sums
    // landing in accumulators rescaled with O: 64 FADDs fewer per key tile, fp16 1.01-1.03x
    // (NOTES.md, h18), bf16 1.00-1.06x (h33, h36); elsewhere FADDs in registers (switch
    // FLASH_SM90_ROW_SUM). The sum is of P as rounded for P V, so O is normalised by exactly
    // the weights it holds, and lse is within the dtype's unit roundoff of the exact sum's
    // (bf16 2^-8, measured up to 1.55e-3; fp16 2^-11, 2e-4; the FADD path's 2e-6): the
    // kernel's documented lse contract. Not D = 128: V's second 64 columns hold the leading
    // offset the ones need. The solo kernels (three blocks an SM) hold them in the alignment
    // pad's place (kAlignPad): 1.015-1.021x at D = 64 causal from 4096 (NOTES.md, h47).
    static constexpr bool kRowSumMma = HeadDim == 64 && FLASH_SM90_ROW_SUM != 1 &&
                                       !(Solo && FLASH_SM90_ROW_SUM == 3);
    static constexpr int kOnesBytes = kRowSumMma ? 2048 : 0;
    // Bytes of dynamic shared memory kept to align the buffers to the 1024-byte atom
    // (Sm90Smem::place). The kernels' barriers are static shared memory, and the dynamic
    // buffer's 1024-byte alignment pads them to 1 KB (ptxas: "1024 bytes smem"), so the buffer
    // starts aligned and the pad goes unused; the solo kernel with the ones drops it (and
    // place() traps if the start is not aligned): 3 x (75,776 + 1 KB static + 1 KB the
    // system's) is the SM's 228 KB exactly.
    static constexpr int kAlignPad = Solo && kRowSumMma ? 0 : 1024;
    static constexpr int kStaticSmem = 1024;
    // Q's buffers, O staging, the K and V rings, the ones, O's halves, and the pad.
    static constexpr int kSmemBytes =
        kQOBytes + 2 * Stages * kTileBytes + kOnesBytes + kOHalvesBytes + kAlignPad;
    // Two consumers: 24 x 128 + 240 x 256 = 64,512 of the SM's 65,536 registers; three:
    // 24 x 128 + 160 x 384 = 64,512.
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = kConsumerWarpgroups == 2 ? 240 : 160;
    static_assert(sizeof(Elem) == 2 && HeadDim % 64 == 0 && BlockN % 16 == 0);
    static_assert(BlockN <= 256 && HeadDim <= 256 && kBlockM <= 256, "wgmma N and TMA box limits");
    static_assert(Solo || kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3, "2 or 3 consumers");
    static_assert(QStages == 1 || QStages == 2, "one or two Q buffers");
    static_assert(!Solo || QStages == 1, "solo: one tile, one Q");
    static_assert(Solo || kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWarpgroups <= 65536);
    // Each block: its dynamic and static shared memory and the 1 KB the system reserves; the
    // dynamic and static parts at most what a block may opt in to (opt_in_shared_memory: the
    // dynamic size plus the kernel's static size at most the device's 227 KB).
    static_assert((kSmemBytes + kStaticSmem + 1024) * kBlocksPerSm <= 228 * 1024,
                  "shared memory an SM");
    static_assert(kSmemBytes + kStaticSmem <= 227 * 1024, "a block's shared memory");

    static __device__ __forceinline__ int tile_row(int mt, int warp) {
        return (mt * kWarps + warp) * 16;
    }
};

}  // namespace flash
