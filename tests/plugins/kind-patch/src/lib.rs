//! Test plugin: `torch.where(cond, x, y)` → `aten.where.self(cond, x, y)`
//! when all three are tensors, else the original call.

use hfx_sdk::prelude::*;

struct PatchWhere;

impl Guest for PatchWhere {
    fn describe() -> Vec<String> {
        targets(&["torch.where"])
    }

    fn apply(call: PatchedCall) -> Result<Program, Error> {
        let all_tensors = call.args.len() == 3
            && call.args.iter().all(|&slot| matches!(call.values.get(slot as usize), Some(CallValue::Tensor(_))));
        let op = OpCall { op: "aten.where.self".into(), args: call.args.clone(), kwargs: Vec::new() };
        let step = if all_tensors { Step::Call(op) } else { Step::Original(op) };
        Ok(Program { steps: vec![step], output: call.values.len() as u32 })
    }
}

hfx_sdk::register_patch!(PatchWhere);
