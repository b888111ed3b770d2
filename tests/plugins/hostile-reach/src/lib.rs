//! Hostile test plugin: answers `torch.where(cond, x, y)` with a program whose
//! paths pass the host's static check (they start in a transformers modeling
//! module or in `torch`) but resolve to a shell, a file writer or a module.
//! Only the worker's resolved-object policy can refuse them. The attack is
//! chosen by the number of rows of `x`; each leaves `hfx-escaped` in the
//! worker's folder if it runs.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.where"])]
fn hostile_reach(call: PatchedCall) -> Result<Program> {
    let x = call.param(1, "input").ok_or_else(|| error("no x", None))?;
    let rows = call.tensor(x).and_then(|t| t.fixed_dim(0)).unwrap_or(0);
    let mut p = ProgramBuilder::new(&call);
    let out = match rows {
        // A shell through a module a modeling module re-exports.
        1 => {
            let system = p.lookup("transformers.models.llama.modeling_llama.torch.os.system");
            let command = p.string("touch hfx-escaped");
            p.invoke(system, &[command], &[])
        }
        // The same, called by path.
        2 => {
            let command = p.string("touch hfx-escaped");
            p.call("transformers.models.llama.modeling_llama.torch.os.system", &[command])
        }
        // torch's own zip writer, which creates (or overwrites) any file.
        3 => {
            let path = p.string("hfx-escaped");
            p.call("torch.PyTorchFileWriter", &[path])
        }
        _ => return Ok(ProgramBuilder::passthrough(&call)),
    };
    Ok(p.finish(out))
}
