//! `hfx plugins test-ops`: every op the set's ONNX translations declare,
//! driven with torch's own test inputs (the OpInfo database, `op_db`, that
//! torch and torch.onnx test their ops with), the way `hfx run` exports a
//! model: each sample is a small program the worker exports (decomposing what
//! no plugin handles), the host runs the backend's FX stages, translations,
//! IR fixes and passes on it, and the worker runs the `.onnx` in ONNX Runtime
//! against eager PyTorch. Per op: samples passed, failed and skipped, with
//! the reasons; and, given the list of exclusions, whether every core ATen op
//! is translated or excluded with a reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::graph::pt2::{convert, Pt2};
use crate::graph::Graph;
use crate::pipeline::emit;
use crate::pipeline::{OnnxOptions, Progress};
use crate::plugins::loading::LoadedSet;
use crate::plugins::{kind, Backend};
use crate::plugins::{NodeRef, PluginError};
use crate::stages::onnx_translation::{ProgramSource, TranslationError};
use crate::stages::{self, OnPluginError};
use crate::trace::protocol::{CheckSample, OpInfos, OpSamples, SampleExport};
use crate::trace::Worker;

/// Building torch's `op_db` and running one sample of each OpInfo.
const SELECT_DEADLINE: Duration = Duration::from_secs(300);
/// One OpInfo's samples, exported.
const SAMPLES_DEADLINE: Duration = Duration::from_secs(300);
const CHECK_DEADLINE: Duration = Duration::from_secs(60);
const MAX_EXCLUSIONS_BYTES: u64 = 1 << 20;

pub struct OpTestOptions {
    /// Only these translated ops (all when empty).
    pub only: Vec<String>,
    pub dtypes: Vec<String>,
    pub per_dtype: u32,
    pub opset: u32,
    /// The core ATen ops excluded from translation, with reasons (`--exclusions`).
    pub exclusions: Option<PathBuf>,
}

/// One sample's outcome.
#[derive(Debug, Clone)]
pub enum Verdict {
    Passed { max_abs: f64 },
    Failed(String),
    Skipped(String),
}

#[derive(Debug, Clone)]
pub struct SampleResult {
    /// `name` or `name.variant` of the OpInfo.
    pub opinfo: String,
    pub dtype: String,
    pub about: String,
    pub verdict: Verdict,
}

#[derive(Debug, Default)]
pub struct OpTally {
    pub passed: usize,
    pub failed: Vec<SampleResult>,
    pub skipped: BTreeMap<String, usize>,
}

pub struct OpReport {
    /// Per translated op (every one the set declares, sampled or not).
    pub ops: BTreeMap<String, OpTally>,
    /// Samples that never reached a translated op (skipped before export, or
    /// holding an op no plugin translates), per OpInfo.
    pub unattributed: BTreeMap<String, BTreeMap<String, usize>>,
    pub coverage: Option<Coverage>,
}

/// Core ATen ops against the set's translations and the exclusions.
pub struct Coverage {
    pub core: usize,
    pub translated: usize,
    pub excluded: BTreeMap<String, String>,
    /// Core ops neither translated nor excluded.
    pub missing: Vec<String>,
    /// Exclusions that are translated after all, or not core ops.
    pub stale: Vec<String>,
}

/// `plugins/onnx/excluded-ops.toml`: `[ops] "aten.x.default" = "why"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Exclusions {
    ops: BTreeMap<String, String>,
}

impl OpReport {
    pub fn failures(&self) -> usize {
        let coverage = self.coverage.as_ref().map_or(0, |c| c.missing.len() + c.stale.len());
        self.ops.values().map(|t| t.failed.len()).sum::<usize>() + coverage
    }
}

pub fn run(
    loaded: &LoadedSet,
    worker: &mut Worker,
    options: &OpTestOptions,
    scratch: &std::path::Path,
    progress: Progress,
) -> Result<OpReport> {
    let translations = stages::select::<kind::OnnxTranslation>(&loaded.set.plugins, Backend::Onnx);
    let translated: BTreeSet<String> =
        translations.iter().flat_map(|t| t.targets.iter().cloned()).collect();
    if translated.is_empty() {
        anyhow::bail!("the plugin folders hold no ONNX translation to test");
    }
    let under_test: BTreeSet<String> = if options.only.is_empty() {
        translated.clone()
    } else {
        let unknown: Vec<&String> =
            options.only.iter().filter(|o| !translated.contains(*o)).collect();
        if !unknown.is_empty() {
            anyhow::bail!(
                "--op {}: no translation in the set declares it",
                unknown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        options.only.iter().cloned().collect()
    };
    let handled = stages::handled_ops(&loaded.set.plugins, Backend::Onnx).unwrap_or_default();

    progress.step("op_db", "selecting OpInfos (torch builds its op database)");
    let selected = worker
        .request(&OpInfos { translated: translated.iter().cloned().collect() }, SELECT_DEADLINE)?;
    let infos: Vec<_> =
        selected.infos.iter().filter(|i| i.ops.iter().any(|o| under_test.contains(o))).collect();

    let mut report = OpReport {
        ops: under_test.iter().map(|op| (op.clone(), OpTally::default())).collect(),
        unattributed: BTreeMap::new(),
        coverage: None,
    };
    let onnx_options = OnnxOptions {
        opset: options.opset,
        external_data: false,
        optimize: true,
        quantize: None,
        weights_dtype: None,
    };
    for (n, info) in infos.iter().enumerate() {
        let opinfo = if info.variant.is_empty() {
            info.name.clone()
        } else {
            format!("{}.{}", info.name, info.variant)
        };
        progress.step("samples", &format!("{}/{} {opinfo}", n + 1, infos.len()));
        let folder = scratch.join(format!("{n}"));
        std::fs::create_dir(&folder).with_context(|| format!("creating {}", folder.display()))?;
        let request = OpSamples {
            name: info.name.clone(),
            variant: info.variant.clone(),
            dtypes: options.dtypes.clone(),
            per_dtype: options.per_dtype,
            handled: handled.clone(),
            folder: folder.clone(),
        };
        let samples = match worker.request(&request, SAMPLES_DEADLINE) {
            Ok(reply) => reply.samples,
            Err(e) => {
                *report
                    .unattributed
                    .entry(opinfo.clone())
                    .or_default()
                    .entry(format!("the worker fails: {}", first_line(&e.to_string())))
                    .or_default() += 1;
                continue;
            }
        };
        for sample in samples {
            let (path, ops, dtype) = match sample.exported {
                SampleExport::Skipped { reason } => {
                    *report
                        .unattributed
                        .entry(opinfo.clone())
                        .or_default()
                        .entry(reason)
                        .or_default() += 1;
                    continue;
                }
                SampleExport::Program { path, ops, .. } => (path, ops, sample.dtype),
            };
            let tested: Vec<&String> = ops.iter().filter(|o| under_test.contains(*o)).collect();
            if tested.is_empty() {
                continue; // decomposed into ops other OpInfos test
            }
            let onnx = path.with_extension("onnx");
            // A failure at a node of one op is that op's; the sample's other ops skip it.
            let (verdict, failed_at) = match translate(loaded, &path, &onnx, &onnx_options) {
                Err(Untranslatable::Missing(target)) => (
                    Verdict::Skipped(format!("holds `{target}`, which no plugin translates")),
                    None,
                ),
                Err(Untranslatable::Failed { message, at }) => (Verdict::Failed(message), at),
                Ok(()) => (check(worker, sample.index, &onnx, &dtype), None),
            };
            for op in tested {
                let verdict = match &failed_at {
                    Some(at) if at != op => Verdict::Skipped(format!("fails at `{at}`")),
                    _ => verdict.clone(),
                };
                let tally = report.ops.get_mut(op).expect("tested ops are under test");
                match verdict {
                    Verdict::Passed { .. } => tally.passed += 1,
                    Verdict::Skipped(reason) => *tally.skipped.entry(reason).or_default() += 1,
                    Verdict::Failed(_) => tally.failed.push(SampleResult {
                        opinfo: opinfo.clone(),
                        dtype: dtype.clone(),
                        about: sample.about.clone(),
                        verdict,
                    }),
                }
            }
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&onnx);
        }
    }
    if let Some(path) = &options.exclusions {
        report.coverage = Some(coverage(&selected.core, &translated, path)?);
    }
    Ok(report)
}

enum Untranslatable {
    /// An op of the sample no translation declares (skipped: another op's gap).
    Missing(String),
    /// The error, and the op of the node a plugin failed at, when it says.
    Failed { message: String, at: Option<String> },
}

/// The sample's `.pt2` to `.onnx` as `hfx run` does it: FX stages, translations, IR fixes, passes.
fn translate(
    loaded: &LoadedSet,
    pt2: &Path,
    onnx: &Path,
    options: &OnnxOptions,
) -> Result<(), Untranslatable> {
    let failed = |message: String| Untranslatable::Failed { message, at: None };
    let archive = Pt2::open(pt2).map_err(|e| failed(e.to_string()))?;
    let program =
        archive.programs.get("model").ok_or_else(|| failed("no `model` program".into()))?;
    let mut graph = convert::to_ir(program).map_err(failed)?;
    // The op of the node a plugin failed at (FX nodes keep their names through the stages).
    let op_at = |graph: &Graph, error: &PluginError| match &error.node {
        Some(NodeRef::Fx(name)) => graph
            .nodes()
            .find(|&n| graph.node_name(n) == *name)
            .and_then(|n| graph.node(n).ok())
            .map(|n| n.target.clone()),
        _ => None,
    };
    if let Err(e) = stages::run_fx_stages(
        &loaded.runtime,
        &loaded.set.plugins,
        Backend::Onnx,
        &mut graph,
        OnPluginError::Fail,
    ) {
        return Err(Untranslatable::Failed { at: op_at(&graph, &e), message: e.to_string() });
    }
    let before = graph.clone();
    let hidden = Progress::hidden();
    let cx = emit::EmitContext { loaded, on_plugin_error: OnPluginError::Fail, progress: hidden };
    let input = emit::OnnxInput {
        source: ProgramSource::Unknown,
        input_names: Vec::new(),
        output_names: Vec::new(),
        prewritten: None,
        size_guards: Vec::new(),
    };
    match emit::onnx(cx, Backend::Onnx, &archive, &mut graph, options, input, onnx) {
        Ok(_) => Ok(()),
        Err(e) => match e.downcast_ref::<TranslationError>() {
            Some(TranslationError::Missing { target, .. }) => {
                Err(Untranslatable::Missing(target.clone()))
            }
            Some(TranslationError::Plugin(error)) => {
                Err(Untranslatable::Failed { at: op_at(&before, error), message: format!("{e:#}") })
            }
            _ => Err(failed(format!("{e:#}"))),
        },
    }
}

fn check(worker: &mut Worker, index: u32, onnx: &Path, dtype: &str) -> Verdict {
    // As a translation's self-test case is held, by the sample's dtype; integer
    // and bool outputs are exact at it (any difference is >= 1).
    let computes_in = hfx_dtype::DType::from_name(dtype).unwrap_or(hfx_dtype::DType::Float32);
    let tolerance = super::tolerance(super::Compared::OnnxRuntime, computes_in);
    let request = CheckSample { index, onnx: onnx.to_path_buf(), atol: tolerance, rtol: tolerance };
    match worker.request(&request, CHECK_DEADLINE) {
        Ok(reply) => match super::numeric_failures(&reply.outputs) {
            Ok(max_abs) => Verdict::Passed { max_abs },
            Err(e) => Verdict::Failed(e),
        },
        Err(e) => {
            let message = first_line(&e.to_string());
            // ONNX Runtime's CPU provider lacks many float16 kernels; a translation need not cast around them.
            if dtype == "float16" && message.contains("NOT_IMPLEMENTED") {
                Verdict::Skipped("ONNX Runtime's CPU has no float16 kernel for an op of it".into())
            } else {
                Verdict::Failed(message)
            }
        }
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    if line.len() > 300 {
        format!(
            "{}...",
            &line[..line
                .char_indices()
                .take_while(|(i, _)| *i < 297)
                .last()
                .map_or(0, |(i, c)| i + c.len_utf8())]
        )
    } else {
        line.to_string()
    }
}

fn coverage(core: &[String], translated: &BTreeSet<String>, path: &Path) -> Result<Coverage> {
    let text = crate::input::read_to_string_bounded(path, MAX_EXCLUSIONS_BYTES)?;
    let exclusions: Exclusions =
        toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let core_set: BTreeSet<&String> = core.iter().collect();
    let missing = core
        .iter()
        .filter(|op| !translated.contains(*op) && !exclusions.ops.contains_key(*op))
        .cloned()
        .collect();
    let stale = exclusions
        .ops
        .keys()
        .filter(|op| translated.contains(*op) || !core_set.contains(op))
        .map(|op| {
            if translated.contains(op) {
                format!("{op} (translated)")
            } else {
                format!("{op} (not a core ATen op)")
            }
        })
        .collect();
    Ok(Coverage {
        core: core.len(),
        translated: core.iter().filter(|op| translated.contains(*op)).count(),
        excluded: exclusions.ops,
        missing,
        stale,
    })
}

impl OpReport {
    /// The report as Markdown: per op, then every failure, every skip reason, the coverage.
    pub fn markdown(&self, options: &OpTestOptions) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "# ONNX translations on torch's OpInfo samples\n");
        let _ = writeln!(
            out,
            "Written by `hfx plugins test-ops` (dtypes {}, up to {} sample(s) per OpInfo and dtype, opset {}). \
             Each sample is exported as `hfx run` traces a model, translated by the plugin set, and run in ONNX Runtime \
             against eager PyTorch: atol/rtol {:e} (float16 {:e}; integer and bool outputs exact). \
             A sample counts for every translated op its program holds.\n",
            options.dtypes.join(", "),
            options.per_dtype,
            options.opset,
            super::tolerance(super::Compared::OnnxRuntime, hfx_dtype::DType::Float32),
            super::tolerance(super::Compared::OnnxRuntime, hfx_dtype::DType::Float16),
        );
        let (sampled, unsampled): (Vec<_>, Vec<_>) = self
            .ops
            .iter()
            .partition(|(_, t)| t.passed + t.failed.len() + t.skipped.values().sum::<usize>() > 0);
        let _ = writeln!(
            out,
            "| op | passed | failed | skipped | skip reasons |\n|---|---:|---:|---:|---|"
        );
        for (op, t) in &sampled {
            let skipped: usize = t.skipped.values().sum();
            let reasons = t
                .skipped
                .iter()
                .map(|(r, n)| format!("{n}× {}", r.replace('|', "\\|")))
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                out,
                "| `{op}` | {} | {} | {skipped} | {reasons} |",
                t.passed,
                t.failed.len()
            );
        }
        let failures: Vec<(&String, &SampleResult)> =
            self.ops.iter().flat_map(|(op, t)| t.failed.iter().map(move |f| (op, f))).collect();
        if !failures.is_empty() {
            let _ = writeln!(
                out,
                "\n## Failures\n\n| op | OpInfo | dtype | sample | error |\n|---|---|---|---|---|"
            );
            for (op, f) in failures {
                let Verdict::Failed(reason) = &f.verdict else { continue };
                let _ = writeln!(
                    out,
                    "| `{op}` | {} | {} | {} | {} |",
                    f.opinfo,
                    f.dtype,
                    f.about.replace('|', "\\|"),
                    first_line(reason).replace('|', "\\|")
                );
            }
        }
        if !unsampled.is_empty() {
            let _ = writeln!(out, "\n## Translated ops no OpInfo sample reaches\n");
            let _ = writeln!(
                out,
                "{}",
                unsampled.iter().map(|(op, _)| format!("`{op}`")).collect::<Vec<_>>().join(", ")
            );
        }
        if let Some(c) = &self.coverage {
            let _ = writeln!(
                out,
                "\n## Core ATen coverage\n\n{} core ATen overloads (`torch.Tag.core`): {} translated, {} excluded, {} neither.\n",
                c.core,
                c.translated,
                c.excluded.len(),
                c.missing.len()
            );
            for op in &c.missing {
                let _ = writeln!(out, "- neither translated nor excluded: `{op}`");
            }
            for op in &c.stale {
                let _ = writeln!(out, "- stale exclusion: `{op}`");
            }
        }
        out
    }
}
