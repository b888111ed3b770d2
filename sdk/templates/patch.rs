// A trace-time patch: `torch.where(cond, x, y)` with three tensors is recorded
// as `aten.where.self`; any other call goes to the original.

use hfx_sdk::prelude::*;

/// Called for each call of a declared target while tracing.
#[hfx_sdk::patch(targets = ["torch.where"])]
fn patch_where(call: PatchedCall) -> Result<Program> {
    let all_tensors = call.args.len() == 3 && call.kwargs.is_empty() && call.args.iter().all(|&slot| call.tensor(slot).is_some());
    if !all_tensors {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    // Slots 0.. are the call's values; each step's result is the next slot.
    let mut program = ProgramBuilder::new(&call);
    let out = program.call("aten.where.self", &call.args);
    Ok(program.finish(out))
}
