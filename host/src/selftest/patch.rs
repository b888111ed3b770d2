//! A patch plugin's self-tests. A patch rewrites Python calls while
//! torch.export traces, so its case is a model to trace, as data: a
//! Python-level program (the calls of a forward, resolved by the patch
//! sandbox's policy as they are made; `hfx_worker/program.py`, captured by
//! `hfx plugins capture --program`) or a transformers architecture from a
//! config. The worker traces it twice, with the patch and without:
//!
//! ```json
//! { "about": "hfx plugins capture --program --model-fn python:patch_patterns:roll --dynamic",
//!   "model": {"kind": "program", "program": {"nodes": [...]}, "inputs": {"x": {"tensor": {...}}}},
//!   "dynamic": true,
//!   "expect": {"ops": {"absent": ["aten.roll"], "present": ["aten.cat"]}} }
//! ```
//!
//! With the patch the trace must succeed, the patch must answer a call, and
//! the traced program must match eager PyTorch (1e-4, as `.pt2` parity is
//! held). `expect` says what shows the patch's effect, and the unpatched
//! trace must lack it (fail to trace, or miss the ops), so a case proves the
//! effect: `changes` (the default: the traced ops differ, or the unpatched
//! model does not trace), `ops` (targets containing these are absent/present),
//! or `answered` (the patch only has to be called: for a patch whose program
//! is the same either way, said so in its case's `about`), or `installed`
//! (no call has to reach it: for a patch whose targets only a GPU path or an
//! optional library calls, said so in `about`, its effect shown elsewhere).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::graph::pt2::Pt2;
use crate::pipeline::verify;
use crate::plugins::{kind, PluginOf, Runtime, Session};
use crate::trace::protocol::CaseValue;
use crate::trace::{ModelSource, TraceRequest, Worker};

const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PatchCase {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
    pub model: CaseModel,
    /// Traced with every axis dynamic (`--dynamic`).
    #[serde(default)]
    pub dynamic: bool,
    #[serde(default)]
    pub expect: Expect,
    /// The outputs compared with eager, by position, when the patch changes
    /// the others by design (a cache that keeps more positions): all by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_outputs: Option<Vec<usize>>,
}

/// The model a patch case traces.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CaseModel {
    /// A Python-level program and its inputs, by name.
    Program { program: serde_json::Value, inputs: BTreeMap<String, CaseValue> },
    /// A random model of a transformers architecture (`--model NAME --set K=V,...`,
    /// `--task` a class of its modeling module), on hfx's generated inputs.
    Architecture {
        name: String,
        #[serde(default)]
        overrides: BTreeMap<String, String>,
        #[serde(default)]
        task: Option<String>,
    },
}

/// What shows the patch's effect; the unpatched trace must not show it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Expect {
    /// The traced ops differ from the unpatched trace's, or only the patched model traces.
    #[default]
    Changes,
    /// Ops whose targets contain these strings are absent from / present in the trace.
    Ops {
        #[serde(default)]
        absent: Vec<String>,
        #[serde(default)]
        present: Vec<String>,
    },
    /// Only that the patch answered a call (its program is the same either way).
    Answered,
    /// Only that the trace with the patch in place matches eager: no call
    /// reaches it on a machine without the GPU path or the optional library
    /// that calls its targets (`is_kernels_available`).
    Installed,
}

/// Configuration keys a case may not set: they name code, kernels or files to
/// load (the worker also builds every case's model with remote code refused).
const OVERRIDES_DENIED: &[&str] =
    &["auto_map", "trust_remote_code", "name_or_path", "quantization_config", "kernel_config"];

impl PatchCase {
    /// A case is as untrusted as its plugin: its `task` is a plain class name
    /// (the worker accepts only a transformers model class by it; a dotted path
    /// would import a module), and its overrides set sizes and flags, never code.
    pub fn check(&self) -> Result<(), String> {
        let CaseModel::Architecture { name, overrides, task } = &self.model else { return Ok(()) };
        let plain = |s: &str| {
            !s.is_empty()
                && !s.starts_with('_')
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !plain(name) {
            return Err(format!("model: `{name}` is not an architecture name"));
        }
        if let Some(task) = task {
            if !plain(task) || task.contains('-') {
                return Err(format!("model: task `{task}` is not a class name (a case names a transformers model class, never a dotted path)"));
            }
        }
        if let Some(key) = overrides.keys().find(|k| {
            !plain(k) || OVERRIDES_DENIED.contains(&k.as_str()) || k.contains("implementation")
        }) {
            return Err(format!("model: the override `{key}` may name code or files to load; a case sets sizes and flags only"));
        }
        Ok(())
    }

    fn request(&self) -> TraceRequest {
        let (source, task) = match &self.model {
            CaseModel::Program { program, inputs } => {
                (ModelSource::Program { program: program.clone(), inputs: inputs.clone() }, None)
            }
            CaseModel::Architecture { name, overrides, task } => (
                ModelSource::Architecture {
                    name: name.clone(),
                    overrides: overrides.clone().into_iter().collect(),
                },
                task.clone(),
            ),
        };
        TraceRequest { task, dynamic: self.dynamic, ..TraceRequest::new(source) }
    }
}

/// Runs `case` for `patch` in `worker`; says what it showed.
pub fn run(
    runtime: &Runtime,
    patch: PluginOf<'_, kind::Patch>,
    case: &PatchCase,
    worker: &mut Worker,
) -> Result<String, String> {
    case.check()?;
    let scratch = worker.temp_dir(".hfx-selftest-").map_err(|e| e.to_string())?;
    let request = case.request();

    // With the patch: it traces, the patch answers, the program matches eager.
    let (with, reference) =
        (scratch.path().join("with.pt2"), scratch.path().join("with.reference.pt"));
    let mut sessions = vec![Session::new(runtime, patch, "selftest")];
    crate::trace::trace(worker, &request, &mut sessions, &with, &reference, DEADLINE)
        .map_err(|e| format!("with the patch: {e}"))?;
    let answered = sessions[0].calls;
    if answered == 0 && !matches!(case.expect, Expect::Installed) {
        return Err("the patch answered no call: the case does not exercise it".into());
    }
    // Against eager as `--verify` checks a `.pt2` (float round-off only).
    let checks = worker
        .request(&verify::request(&verify::Runtime::Pt2, &with, &reference), DEADLINE)
        .map_err(|e| format!("checking the patched program: {e}"))?
        .checks;
    let mut worst = 0f64;
    for check in &checks {
        let compared: Vec<_> = match &case.compare_outputs {
            None => check.outputs.clone(),
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|&&i| i >= check.outputs.len()) {
                    return Err(format!(
                        "compare-outputs names output {missing}; the program has {}",
                        check.outputs.len()
                    ));
                }
                wanted.iter().map(|&i| check.outputs[i].clone()).collect()
            }
        };
        worst = worst.max(
            super::numeric_failures(&compared)
                .map_err(|e| format!("the patched program against eager: {e}"))?,
        );
    }
    let patched = targets(&with)?;

    // Without it: the effect must be missing (or the model must not trace).
    // An `answered` or `installed` case claims no effect, so it is not traced again.
    let mut without = || {
        let path = scratch.path().join("without.pt2");
        crate::trace::trace(
            worker,
            &request,
            &mut [],
            &path,
            &scratch.path().join("without.reference.pt"),
            DEADLINE,
        )
        .map_err(|e| e.to_string())
        .and_then(|_| targets(&path))
    };
    let not_traced = |e: String| {
        format!("the model does not trace without it ({})", e.lines().next().unwrap_or_default())
    };
    let effect = match &case.expect {
        Expect::Answered => "its program is the same either way".to_string(),
        Expect::Installed => "installed while tracing (no call reaches it here)".to_string(),
        Expect::Changes => match without() {
            Err(e) => not_traced(e),
            Ok(unpatched) if unpatched == patched => {
                return Err("the traced program is the same without the patch: the case does not show its effect".into())
            }
            Ok(unpatched) => format!("{} traced ops, {} without it", patched.len(), unpatched.len()),
        },
        Expect::Ops { absent, present } => match without() {
            Err(e) => not_traced(e),
            Ok(unpatched) => {
                ops_shown(&patched, absent, present).map_err(|e| format!("with the patch: {e}"))?;
                match ops_shown(&unpatched, absent, present) {
                    Ok(()) => return Err("the ops expected are there without the patch too: the case does not show its effect".into()),
                    Err(e) => format!("without it {e}"),
                }
            }
        },
    };
    let outputs = match &case.compare_outputs {
        None => "every output".to_string(),
        Some(wanted) => format!("output(s) {wanted:?}"),
    };
    Ok(format!("answered {answered} call(s); {effect}; max abs error {worst:.1e} against eager on {outputs}"))
}

/// The targets of a traced `.pt2`'s nodes, sorted.
fn targets(path: &Path) -> Result<Vec<String>, String> {
    let mut pt2 = Pt2::open(path).map_err(|e| e.to_string())?;
    let program =
        pt2.programs.remove("model").ok_or("the traced archive has no `model` program")?;
    let mut targets: Vec<String> =
        program.graph_module.graph.nodes.into_iter().map(|n| n.target).collect();
    targets.sort();
    Ok(targets)
}

/// Whether `targets` has no op containing an `absent` string and one containing each `present` one.
fn ops_shown(targets: &[String], absent: &[String], present: &[String]) -> Result<(), String> {
    if let Some(op) = absent.iter().find(|op| targets.iter().any(|t| t.contains(op.as_str()))) {
        return Err(format!("{op} is in the trace"));
    }
    if let Some(op) = present.iter().find(|op| !targets.iter().any(|t| t.contains(op.as_str()))) {
        return Err(format!("{op} is not in the trace"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::PatchCase;

    fn case(task: Option<&str>, override_key: &str) -> PatchCase {
        let mut model = serde_json::json!({"kind": "architecture", "name": "llama", "overrides": {"hidden_size": "32"}});
        if let Some(task) = task {
            model["task"] = task.into();
        }
        model["overrides"][override_key] = "x".into();
        serde_json::from_value(serde_json::json!({"model": model})).unwrap()
    }

    #[test]
    fn a_case_task_is_a_class_name_and_its_overrides_name_no_code() {
        assert!(case(Some("LlamaForCausalLM"), "num_hidden_layers").check().is_ok());
        assert!(case(None, "sliding_window").check().is_ok());
        for task in ["transformers.utils.hub.cached_file", "os.system", "_from_config", "", "a b"] {
            assert!(case(Some(task), "num_hidden_layers").check().is_err(), "{task}");
        }
        for key in [
            "auto_map",
            "attn_implementation",
            "_attn_implementation",
            "experts_implementation",
            "trust_remote_code",
        ] {
            assert!(case(None, key).check().unwrap_err().contains(key), "{key}");
        }
    }
}
