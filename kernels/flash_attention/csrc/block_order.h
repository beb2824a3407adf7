// Which (query block, head, batch) each block of a causal launch of the sm_80 kernel computes.
// The hardware starts blocks in grid order, so the order decides how long SMs idle at the end.
#pragma once

#include "switches.h"

namespace flash {

// Causal query blocks carry 1..m_blocks key tiles. Taken per head, heaviest first (the order
// before v13), the heads follow one another like saw teeth: the heaviest blocks of the last
// heads start shortly before the end and run on while other SMs idle (a greedy scheduling
// model of the benchmark grid: 6-15 % over the ideal on an H100, 1.5-6 % on an L4; grouped as
// below, 0.6-3.1 % and 0.3-0.7 %, NOTES.md v13). Heaviest first over the whole launch ends
// evenly, but then the blocks running at once belong to as many heads as there are slots and
// each streams its own head's K/V (8x the DRAM traffic at S = 1024, NOTES.md h3). So heads go
// in groups of about kCausalGroupWaves waves of blocks: group after group, within a group
// heaviest query blocks first, heads fastest. The blocks running at once share the K/V of
// about kCausalGroupWaves * slots / m_blocks heads, and every group, the last included, ends
// evenly. Under L4 emulation (NOTES.md, v13), causal S >= 1024 went from median 1.034 to 1.091
// of FA2 (groups of one wave: 1.074).
// The Hopper kernel (one block per SM) keeps the per-head order: this one measured 0.855
// against 0.877 of cuDNN there, worst at S <= 1024.
//
// The launch is a (width, m_blocks, groups) grid, started x fastest. Groups differ in size by
// one head at most: the first `larger` hold group + 1 heads, the others `group`, and width is
// the largest; in a smaller group the last column is idle.
constexpr int kCausalGroupWaves = 2;

struct CausalOrder {
    int m_blocks = 1;  // query blocks per head
    int heads = 1;     // of one batch entry
    int group = 1;
    int larger = 0;
    int groups = 1;
    int width() const { return group + (larger > 0); }
};

// `slots`: blocks resident at once on the whole GPU (SMs x blocks per SM).
inline CausalOrder make_causal_order(int m_blocks, int heads, int batch, int slots) {
    CausalOrder order;
    order.m_blocks = m_blocks;  // >= 1: the dispatcher refuses seqlen_q <= 0
    order.heads = heads;
    const int all_heads = heads * batch;
    const int target = (kCausalGroupWaves * slots + order.m_blocks - 1) / order.m_blocks;
    // Groups of (nearly) equal size: a small last group would run saw-toothed again.
    const int groups = all_heads / target;
    // A grid's z extent is at most 65535: more heads per group beyond that.
    order.groups = groups < 1 ? 1 : (groups > 65535 ? 65535 : groups);
    order.group = all_heads / order.groups;
    order.larger = all_heads % order.groups;
    return order;
}

struct BlockCoord {
    int m_block, head, batch;
    bool idle;  // a smaller group's spare column: nothing to compute
};

// The block at (x, y, z) of the grid above.
__device__ __forceinline__ BlockCoord causal_block_at(const CausalOrder& order, int x, int y,
                                                      int z) {
    // The z groups before this one hold z * group heads, plus one in each larger group.
    const int flat_head = z * order.group + min(z, order.larger) + x;
    BlockCoord c;
    c.idle = x >= order.group + (z < order.larger);
    c.m_block = order.m_blocks - 1 - y;  // y = 0: the heaviest query block of each head
    c.batch = flat_head / order.heads;
    c.head = flat_head - c.batch * order.heads;
    return c;
}

}  // namespace flash
