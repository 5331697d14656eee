#pragma once
// The one place that says how close is close enough, and why.
namespace latentserve::testing {

// A fast f32 kernel against its f64 scalar reference: rounding of f32 sums over
// O(1000) terms stays well under this (relative to max |ref|, or absolute below 1).
inline constexpr double kF32KernelRelTol = 2e-5;
// End to end against Hugging Face transformers (issue 2): f32 checkpoints.
inline constexpr double kLogitsAbsTolF32Checkpoint = 2e-4;
// bf16 checkpoints computed in f32 (transformers also upcast to f32 for the fixture).
inline constexpr double kLogitsAbsTolBf16Checkpoint = 2e-3;

// The GPU path keeps activations in bf16 (weights bf16, f32 accumulation and residual):
// each of the dozen roundings per layer is 2^-9 relative, so its logits sit a few percent
// of their own scale from an f32 computation. Relative L2 over all logits, and the largest
// single difference over the reference's RMS.
inline constexpr double kLogitsRelL2TolBf16Compute = 2e-2;
inline constexpr double kLogitsMaxAbsTolBf16Compute = 0.15;

}  // namespace latentserve::testing
