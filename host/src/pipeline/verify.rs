//! The verify step (`--verify`): the ONNX model in ONNX Runtime, in the
//! worker, on the recorded inputs (and a second size for dynamic exports)
//! against eager PyTorch, atol/rtol 1e-3.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::trace::protocol::{Check, Verify, VerifyModel};
use crate::trace::Worker;

/// The tolerance of `--verify`, absolute and relative.
const TOLERANCE: f64 = 1e-3;

/// Runs the model against the eager reference; any output out of tolerance
/// is an error naming it. The checks are returned for the summary.
pub fn run(worker: &mut Worker, model: &Path, reference: &Path, deadline: Duration) -> Result<Vec<Check>> {
    if !reference.exists() {
        bail!("--verify: no eager reference at {} (hfx writes one when it traces)", reference.display());
    }
    let params = Verify { model: VerifyModel::Onnx { path: model.into() }, reference: reference.into(), second_size: true, atol: TOLERANCE, rtol: TOLERANCE };
    let answer = worker.request(&params, deadline)?;
    let failed: Vec<String> = answer
        .checks
        .iter()
        .flat_map(|c| {
            c.outputs.iter().enumerate().filter(|(_, o)| !o.ok).map(move |(i, _)| format!("output {i} for inputs {}", shapes(&c.inputs)))
        })
        .collect();
    if !failed.is_empty() {
        print(&answer.checks);
        bail!("--verify: ONNX Runtime differs from eager PyTorch beyond atol/rtol 1e-3 ({}); the output was not written", failed.join("; "));
    }
    Ok(answer.checks)
}

/// The max abs/rel error per output.
pub fn print(checks: &[Check]) {
    for check in checks {
        println!("verify inputs {}", shapes(&check.inputs));
        for (i, output) in check.outputs.iter().enumerate() {
            println!(
                "  output {i:<3} {:<18} max abs {:>9.2e}  max rel {:>9.2e}  {}",
                shapes(&output.shape),
                output.max_abs.unwrap_or(f64::NAN),
                output.max_rel.unwrap_or(f64::NAN),
                if output.ok { "ok" } else { "MISMATCH" }
            );
        }
    }
}

/// Shapes as JSON (`{"input_ids":[2,8]}`, `[2,8,32]`), as the summary always showed them.
fn shapes(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
