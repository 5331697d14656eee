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

}  // namespace latentserve::testing
