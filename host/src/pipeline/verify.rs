//! The verify step (`--verify`): the ONNX model in ONNX Runtime, in the
//! worker, on the recorded inputs (and a second size for dynamic exports)
//! against eager PyTorch, atol/rtol 1e-3.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::trace::Worker;

/// One set of inputs the model ran on.
#[derive(Debug, Clone)]
pub struct Check {
    /// The inputs' shapes, as the worker describes them.
    pub inputs: String,
    pub outputs: Vec<OutputCheck>,
}

#[derive(Debug, Clone)]
pub struct OutputCheck {
    pub shape: String,
    pub max_abs: f64,
    pub max_rel: f64,
    pub ok: bool,
}

/// Runs the model against the eager reference; any output out of tolerance
/// is an error naming it. The checks are returned for the summary.
pub fn run(worker: &mut Worker, model: &Path, reference: &Path, deadline: Duration) -> Result<Vec<Check>> {
    if !reference.exists() {
        bail!("--verify: no eager reference at {} (hfx writes one when it traces)", reference.display());
    }
    let answer = worker.call("verify", serde_json::json!({"onnx": model, "reference": reference, "second_size": true}), deadline)?;
    let mut checks = Vec::new();
    for check in answer["checks"].as_array().into_iter().flatten() {
        let outputs = check["outputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|output| OutputCheck {
                shape: output["shape"].to_string(),
                max_abs: output["max_abs"].as_f64().unwrap_or(f64::NAN),
                max_rel: output["max_rel"].as_f64().unwrap_or(f64::NAN),
                ok: output["ok"].as_bool().unwrap_or(false),
            })
            .collect();
        checks.push(Check { inputs: check["inputs"].to_string(), outputs });
    }
    let failed: Vec<String> = checks
        .iter()
        .flat_map(|c| c.outputs.iter().enumerate().filter(|(_, o)| !o.ok).map(move |(i, _)| format!("output {i} for inputs {}", c.inputs)))
        .collect();
    if !failed.is_empty() {
        print(&checks);
        bail!("--verify: ONNX Runtime differs from eager PyTorch beyond atol/rtol 1e-3 ({}); the output was not written", failed.join("; "));
    }
    Ok(checks)
}

/// The max abs/rel error per output.
pub fn print(checks: &[Check]) {
    for check in checks {
        println!("verify inputs {}", check.inputs);
        for (i, output) in check.outputs.iter().enumerate() {
            println!(
                "  output {i:<3} {:<18} max abs {:>9.2e}  max rel {:>9.2e}  {}",
                output.shape,
                output.max_abs,
                output.max_rel,
                if output.ok { "ok" } else { "MISMATCH" }
            );
        }
    }
}
