// Compile-time shape of one sm_80 kernel instance: everything a tile needs to know.
#pragma once

namespace flash {

// One thread block of 4 warps owns kBlockM = 64 * MTiles query rows. MTiles = 2 gives each warp
// 32 query rows (two m16 tiles) that share every K/V fragment read from shared memory: half
// the shared-memory traffic per mma, paid for with Q re-read from shared memory (no
// registers left to keep it). K and V tiles of BlockN keys pass through Stages (1 or 2)
// shared-memory buffers each: two stages let a tile's loads fly for a whole iteration
// behind one barrier; one stage halves the K/V footprint where shared memory is scarce.
template <typename Elem_, int HeadDim, int MTiles, int BlockN, int Stages>
struct FwdTraits {
    using Elem = Elem_;
    static constexpr int kHeadDim = HeadDim;
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
    static constexpr int kChunks = HeadDim / 8;   // 16-byte chunks per row
    static constexpr int kNTiles = BlockN / 8;    // n8 score tiles per m-tile
    static constexpr int kDTiles = HeadDim / 8;   // n8 output tiles per m-tile
    static constexpr int kKSteps = HeadDim / 16;  // k16 steps of S = Q K^T
    static constexpr int kSmemElems = kBlockM * HeadDim + 2 * Stages * kBlockN * HeadDim;
    static constexpr int kSmemBytes = kSmemElems * 2;
    static_assert(sizeof(Elem) == 2, "16-bit elements");
    static_assert(HeadDim == 64 || HeadDim == 128, "head dim 64 or 128");
    static_assert(Stages == 1 || Stages == 2, "one or two K/V stages");
    static_assert(BlockN % 16 == 0, "K/V tile is whole k16 steps of P.V");

    // Warp w owns tile rows (mt * kWarps + w) * 16 .. +15 of m-tile mt.
    static __device__ __forceinline__ int tile_row(int mt, int warp) {
        return (mt * kWarps + warp) * 16;
    }
};

}  // namespace flash
