// A trace-time patch: `torch.where(cond, x, y)` with three tensors is recorded
// as `aten.where.self`; any other call goes to the original.

use hfx_sdk::prelude::*;

struct Patch;

impl Guest for Patch {
    fn describe() -> Vec<String> {
        targets(&["torch.where"])
    }

    fn apply(call: PatchedCall) -> Result<Program, Error> {
        let all_tensors = call.args.len() == 3
            && call.args.iter().all(|&slot| matches!(call.values.get(slot as usize), Some(CallValue::Tensor(_))));
        let op = OpCall { op: "aten.where.self".into(), args: call.args.clone(), kwargs: call.kwargs.clone() };
        let step = if all_tensors { Step::Call(op) } else { Step::Original(op) };
        // Slots 0.. are the call's values; the first step's result is the next slot.
        Ok(Program { steps: vec![step], output: call.values.len() as u32 })
    }
}

hfx_sdk::register_patch!(Patch);
