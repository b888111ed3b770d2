// A trace-time patch: `torch.where(cond, x, y)` with three tensors is recorded
// as `aten.where.self`; any other call goes to the original.

use hfx_sdk::prelude::*;

struct Patch;

impl Guest for Patch {
    fn describe() -> Vec<String> {
        targets(&["torch.where"])
    }

    fn apply(call: PatchedCall) -> Result<Program, Error> {
        let all_tensors = call.args.len() == 3 && call.kwargs.is_empty() && call.args.iter().all(|&slot| call.tensor(slot).is_some());
        if !all_tensors {
            return Ok(ProgramBuilder::passthrough(&call));
        }
        // Slots 0.. are the call's values; each step's result is the next slot.
        let mut program = ProgramBuilder::new(&call);
        let out = program.call("aten.where.self", &call.args);
        Ok(program.finish(out))
    }
}

hfx_sdk::register_patch!(Patch);
