// The Hopper kernel's per-kernel choices (DESIGN.md lists each with the NOTES.md entry that
// decided it).
#pragma once

#include "kernel_traits.h"
#include "switches.h"

namespace flash {

// Choices per kernel, each shipped where it measured faster (NOTES.md, h12-h14; the switches
// force either).
// kDescriptorSteps: wgmma descriptors as a base per buffer plus compile-time steps, Q's kept
// in uniform registers (qk_wgmma): 0.3-0.5 % at D = 128 and 2-5 % at D = 64 non-causal, 4-5 %
// (with kOwnKeyBound) for three causal consumers, 1-3 % for two causal consumers (without
// kOwnKeyBound, whose code the two-consumer loops grew by); D = 256 was not measured.
// kOwnKeyBound: causal, each consumer warpgroup stops at its own last visible key tile rather
// than the block's (in a 192-row block the first 64 rows see up to 128 keys fewer than the
// last; with two consumers and 128-key tiles the bounds coincide).
// kTreeMax: each row half's maximum over a key tile as four partial maxima combined last, not
// one chain of dependent maxima (the chain held a tenth of the D = 128 loop's stall samples);
// the result is the same, a maximum being exact in any order. Measured 1.02-1.03x for three
// causal consumers and within the same-code spread elsewhere (NOTES.md h14): shipped for three
// causal consumers (h15), for two causal consumers where the tensor core sums the rows (fp16
// D = 64: with the row sums' FADD chain gone, the maxima's chain is the softmax's longest;
// 1.02-1.05x at causal 1024-4096, NOTES.md h24), and since the tensor core sums every D = 64
// kernel's rows (h36), for all of D = 64 (non-causal 1.005-1.015x, NOTES.md h37).
// kSumParts: each row half's sum of P over a key tile (where the registers sum it) as that many
// partial sums added last, not one chain of dependent additions (OnlineSoftmax::exponentiate):
// two at D = 128 (1.02-1.03x one chain; four 0.99x two), four at D = 256 (1.00-1.03x two), one
// at D = 64, where bf16 ran 2-5 % slower with two or four (NOTES.md, h32).
// kLazyRescale: the softmax's reference max moves only when a tile passes it by more than 2^8
// (OnlineSoftmax::fold_lazy), so O's rescale after the wait for P V is rare after the first
// tile: D = 256 (1.02-1.08x from 2048) and the three-consumer D = 64 kernels (1.005-1.015x); the
// two-consumer D = 64 kernels ran 2-5 % slower with it; D = 128 0.99-1.02x (NOTES.md, h35), and
// within the A/A on a clean screen, 0.99x at 16k (h44): its rescale is off the critical path.
// kTmaStore: where O is staged (D = 64 and 128), each consumer warp stores its own 16 rows with
// TMA stores (write_output_tma) instead of every thread copying 16-byte chunks after a barrier
// over its warpgroup: no barrier in the epilogue, the copy off the consumers; 1.00-1.035x at
// D = 64, but 0.96-0.99x at D = 128 without kTwoP (NOTES.md, h27). The staging addresses are
// h26's, from a base per thread (stage_rows_base).
// kTwoP: two buffers of P's A fragments, so that P_j is packed as its exponentials come, under
// the P_{j-1} V_{j-1} that reads the other, not after it has landed: with kTmaStore 1.01-1.02x
// the tree before at D = 128; shipped there, and at D = 64 where the registers sum the rows
// (the non-causal two-consumer kernel in bf16 until h36 moved its sums to the tensor core; the
// switch FLASH_SM90_ROW_SUM=1 brings it back); the causal D = 64 two-consumer kernels ran
// 1-4 % slower with it than without (NOTES.md, h28), the fp16 non-causal one (row sums by the
// tensor core) 1 % slower (h29).
// Two P buffers with the threads' copy-out spilled at D = 128 (11-24 LDL in the loop).
// kRingFromZero: every tile's key loop from the K/V ring's stage 0, each stage's use parity
// carried across tiles, not the ring's count (RingPosition): three consumers only, where the
// count cost the key loop per-thread stage descriptors (R2UR 25 -> 4, 569 -> 558 instructions)
// and the switch measured 1.022-1.032x at D = 64 non-causal (A/A 1.001-1.016); the other kernels'
// loops keep their descriptors either way, and D = 128 / 256 read 0.989-1.020x, within their
// A/A (NOTES.md, h46).
// T::kRowSumMma (kernel_traits.h): the softmax's row sums by the tensor core (h18).
template <typename T, bool Causal>
struct Sm90Choices {
    static constexpr bool kDescriptorSteps =
        FLASH_SM90_DESC_STEPS == 0 ? T::kHeadDim <= 128 : FLASH_SM90_DESC_STEPS == 2;
    static constexpr bool kOwnKeyBound =
        Causal && (FLASH_SM90_OWN_KEY_BOUND == 0 ? T::kConsumerWarpgroups == 3
                                                 : FLASH_SM90_OWN_KEY_BOUND == 2);
    static constexpr bool kTreeMax =
        FLASH_SM90_TREE_MAX == 0 ? T::kHeadDim == 64 : FLASH_SM90_TREE_MAX == 2;
    static constexpr int kSumParts =
        FLASH_SM90_TREE_SUM == 0 ? (T::kHeadDim == 64 ? 1 : T::kHeadDim == 128 ? 2 : 4)
                                 : (FLASH_SM90_TREE_SUM == 1 ? 1 : FLASH_SM90_TREE_SUM == 2 ? 4 : 2);
    static constexpr bool kLazyRescale =
        FLASH_SM90_LAZY_RESCALE == 0
            ? T::kHeadDim == 256 || (T::kHeadDim == 64 && T::kConsumerWarpgroups == 3)
            : FLASH_SM90_LAZY_RESCALE == 2;
    static constexpr bool kTmaStore = T::kStageO || T::kStageOHalves;
    static constexpr bool kTwoP =
        T::kConsumerWarpgroups == 2 &&
        (FLASH_SM90_P_BUFFERS == 0
             ? T::kHeadDim == 128 || (T::kHeadDim == 64 && !Causal && !T::kRowSumMma)
             : FLASH_SM90_P_BUFFERS == 2 && T::kHeadDim <= 128);
    static constexpr bool kRingFromZero = FLASH_SM90_RING_FROM_ZERO == 0
                                              ? T::kConsumerWarpgroups == 3
                                              : FLASH_SM90_RING_FROM_ZERO == 2;
};

}  // namespace flash
