//! The calibrate step of `--quantize int8-static`: after the emit step wrote
//! each component with its activations' quantize / dequantize pairs, the
//! float model beside it (`onnx::calibrate`) runs in the worker's ONNX
//! Runtime on the calibration inputs, and each pair's scale and zero point
//! is set in the written model from the ranges measured; before the verify
//! step, which checks the calibrated model.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::onnx::calibrate;
use crate::onnx::quantize::Calibration;
use crate::trace::protocol::{Calibrate, CalibrationModel};
use crate::trace::Worker;

/// What the calibration inputs are: the eager reference whose inputs the
/// generated samples vary (a single export), or `generate` through the
/// components for `steps` new tokens per sample (`--generation`).
pub enum Inputs<'p> {
    Reference(Option<&'p Path>),
    Generation { steps: u32 },
}

/// The float models calibration runs, removed when dropped.
struct CalibrationFiles(Vec<PathBuf>);

impl Drop for CalibrationFiles {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The float model of the component at `model`, beside it (its external
/// data is found relative to the model's folder).
fn calibration_path(model: &Path) -> PathBuf {
    let stem = model.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default();
    model.with_file_name(format!("{stem}.calibration.onnx"))
}

/// Calibrates the `components` (name, written model) on `calibration`'s
/// inputs and sets their activations' scales and zero points; returns what
/// they were calibrated on, for the report.
pub fn run(
    worker: &mut Worker,
    components: &[(String, PathBuf)],
    calibration: &Calibration,
    inputs: Inputs,
    deadline: Duration,
) -> Result<String> {
    let mut files = CalibrationFiles(Vec::new());
    let mut models = BTreeMap::new();
    for (name, model) in components {
        let path = calibration_path(model);
        files.0.push(path.clone());
        let activations = calibrate::calibration_model(model, &path)
            .with_context(|| format!("component `{name}`: writing its calibration model"))?;
        // A component without activations still runs: `generate` calls it.
        models.insert(name.clone(), CalibrationModel { path, activations });
    }
    if models.values().all(|m| m.activations.is_empty()) {
        return Ok("nothing to calibrate".into());
    }
    let (reference, generation, steps) = match inputs {
        Inputs::Reference(reference) => (reference.map(Path::to_path_buf), false, 0),
        Inputs::Generation { steps } => (None, true, steps),
    };
    let request = Calibrate {
        components: models,
        reference,
        samples: calibration.samples,
        inputs: calibration.file.clone(),
        generation,
        steps,
    };
    let reply =
        worker.request(&request, deadline).context("calibrating (--quantize int8-static)")?;
    for component in &reply.components {
        let model = components
            .iter()
            .find(|(name, _)| name == &component.name)
            .map(|(_, model)| model)
            .with_context(|| {
                format!("the worker calibrated an unknown component `{}`", component.name)
            })?;
        let ranges: HashMap<String, (f64, f64)> =
            component.ranges.iter().map(|r| (r.name.clone(), (r.min, r.max))).collect();
        calibrate::set_ranges(model, &ranges)
            .with_context(|| format!("component `{}`", component.name))?;
    }
    Ok(match &calibration.file {
        Some(file) => format!("MinMax over {} sample(s) of {}", reply.samples, file.display()),
        None => format!("MinMax over {} generated sample(s)", reply.samples),
    })
}
