// Score masking: keys past the sequence end and, when causal, keys right of the diagonal.
#pragma once

#include <math.h>

namespace flash {

// Sets to -inf the scores of one K tile (keys n0 ..) that no query row may see. s holds, per
// m-tile, the mma C fragments of this thread: rows lane / 4 (+ 8), columns 2 * (lane % 4) (+ 1)
// of each n8 tile. Bottom-right causal alignment: row i sees keys j <= i + causal_offset.
template <typename T, bool Causal>
__device__ __forceinline__ void mask_scores(float (&s)[T::kMTiles][T::kNTiles][4], int m0, int n0,
                                            int seqlen_k, int causal_offset, int warp,
                                            int lane) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int t = 0; t < T::kNTiles; ++t)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int col = n0 + t * 8 + (lane % 4) * 2 + (c & 1);
                const int row = m0 + T::tile_row(mt, warp) + lane / 4 + (c >> 1) * 8;
                if (col >= seqlen_k || (Causal && col > row + causal_offset))
                    s[mt][t][c] = -INFINITY;
            }
}

}  // namespace flash
