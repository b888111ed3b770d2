//! `unsqueeze` and `exp` of complex tensors, through their real and imaginary
//! parts: onnxscript has no complex dispatch for either. `exp` goes through
//! Euler's formula, e^(a+ib) = e^a (cos b + i sin b). Real inputs go to the
//! original.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.unsqueeze", "torch.Tensor.unsqueeze", "torch.exp", "torch.Tensor.exp"])]
fn patch_complex_unsqueeze_exp(call: PatchedCall) -> Result<Program> {
    let Some(&input) = call.args.first() else { return Ok(ProgramBuilder::passthrough(&call)) };
    if !call.tensor(input).is_some_and(|t| t.is_complex()) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let mut p = ProgramBuilder::new(&call);
    let real = p.getattr(input, "real");
    let imag = p.getattr(input, "imag");
    let (re, im) = if call.target.ends_with(".unsqueeze") {
        let dim = call.param(1, "dim").ok_or_else(|| error("unsqueeze without dim", None))?;
        (p.original(&[real, dim], &[]), p.original(&[imag, dim], &[]))
    } else {
        let magnitude = p.original(&[real], &[]);
        let cos = p.call("torch.cos", &[imag]);
        let sin = p.call("torch.sin", &[imag]);
        (p.call("torch.mul", &[magnitude, cos]), p.call("torch.mul", &[magnitude, sin]))
    };
    let out = p.call("torch.complex", &[re, im]);
    Ok(p.finish(out))
}
