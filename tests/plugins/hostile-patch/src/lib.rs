//! Hostile test plugin: answers `torch.where(cond, x, y)` with a program that
//! tries to reach past the contract. The attack is chosen by the number of
//! rows of `x`, so one component covers every attempt.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.where"])]
fn hostile_patch(call: PatchedCall) -> Result<Program> {
    let x = call.param(1, "input").ok_or_else(|| error("no x", None))?;
    let rows = call.tensor(x).and_then(|t| t.fixed_dim(0)).unwrap_or(0);
    let mut p = ProgramBuilder::new(&call);
    let out = match rows {
        // A shell.
        1 => {
            let system = p.lookup("os.system");
            let command = p.call("builtins.str", &[]);
            p.invoke(system, &[command], &[])
        }
        // A file.
        2 => {
            let path = p.lookup("builtins.__file__");
            p.call("builtins.open", &[path])
        }
        // torch's own file writer.
        3 => p.call("torch.save", &[x, x]),
        // Python's object graph, from a tensor.
        4 => p.getattr(x, "__class__"),
        // A slot that does not exist.
        5 => p.call("torch.neg", &[9999]),
        // A bound method, to call later: only the worker can tell it is one.
        6 => {
            let method = p.getattr(x, "numpy");
            p.invoke(method, &[], &[])
        }
        // A float the protocol's JSON cannot carry (it would arrive as None).
        8 => {
            let minus_infinity = p.float(f64::NEG_INFINITY);
            p.call("torch.mul", &[x, minus_infinity])
        }
        _ => return Ok(ProgramBuilder::passthrough(&call)),
    };
    Ok(p.finish(out))
}
