//! `bernoulli` as `rand(input.shape) < p`, cast to the input's dtype, as the
//! reference's `_patch_bernoulli`. ExecuTorch has no kernel for
//! `aten::bernoulli` (SpeechT5's prenet keeps its dropout on at inference):
//! the portable program cannot be emitted and the XNNPACK one fails in
//! ExecuTorch's edge lowering (not a core ATen op). `rand` has a portable
//! kernel, so the draw stays random. The reference draws with `rand_like`,
//! which passes the edge lowering but has no kernel in executorch 1.4.1's
//! portable runtime (the portable program cannot be emitted, the XNNPACK
//! one does not load: `Failed to load method forward`), so this draws with
//! `rand` of the input's shape, dtype and device. Both forms: `bernoulli(input)` (the input holds the
//! probabilities) and `bernoulli(input, p)` (one probability, a float).
//! A `generator` is ignored, as in the reference (an exported program carries
//! none); `out=` keeps the original.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.bernoulli", "torch.Tensor.bernoulli"])]
fn patch_bernoulli(call: PatchedCall) -> Result<Program> {
    let Some(input) = call.param(0, "input").or_else(|| call.param(0, "self")) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let Some(dtype) = call.tensor(input).map(|t| t.meta.dtype.clone()) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    if !call.is_none(call.kwarg("out")) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let probability = call.param(1, "p").filter(|&p| !call.is_none(Some(p)));
    if probability.is_some_and(|p| call.float(p).is_none()) {
        return Ok(ProgramBuilder::passthrough(&call));
    }

    let mut p = ProgramBuilder::new(&call);
    let shape = p.getattr(input, "shape");
    let own_dtype = p.dtype(&dtype);
    let device = p.getattr(input, "device");
    let draws = p.call_kw("torch.rand", &[shape], &[("dtype", own_dtype), ("device", device)]);
    let hits = p.call("torch.lt", &[draws, probability.unwrap_or(input)]);
    let out = p.call("torch.Tensor.to", &[hits, own_dtype]);
    Ok(p.finish(out))
}
