//! What a run reports, printed by the CLI once the artifact is in place.

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::trace::{FixedAxis, TraceSummary};
use super::verify;
use crate::onnx::optimize::OptimizeReport;
use crate::plugins::loading::{LoadedSet, SetOptions};
use crate::plugins::{Backend, PluginKind, Skipped, Versions};
use crate::stages::StageReport;
use crate::trace::protocol::{Check, EdgeProgramReply, LowerReply, VerifyModel};

/// How a `.pte` was made: by ExecuTorch with a delegate, or by hfx's native emitter.
pub enum Lowered {
    Delegated(LowerReply),
    Portable { edge: EdgeProgramReply, emitted: crate::executorch::Emitted, emit: Duration },
}

impl Lowered {
    /// The lowered program's input spec, which the ExecuTorch runtime runs it with.
    pub fn in_spec(&self) -> &str {
        match self {
            Lowered::Delegated(reply) => &reply.in_spec,
            Lowered::Portable { edge, .. } => &edge.in_spec,
        }
    }
}

/// What a run did: each program it exported (one, `model`, unless
/// `--generation` split the model), the generation check, what it wrote.
pub struct RunSummary {
    pub components: Vec<Component>,
    /// Greedy tokens through the components against eager (`--generation --verify`).
    pub generation: Option<super::generation::Checked>,
    pub backend: Backend,
    /// Another backend's export of the same run whose trace this one used
    /// (`--backend onnx,dynamo`: one trace, reported with the first).
    pub trace_shared_with: Option<Backend>,
    /// The plugins that applied, and what the lock said of them.
    pub plugin_set: PluginSetSummary,
    pub environment: Environment,
    pub skipped: Vec<Skipped>,
    /// The file or export folder written.
    pub written: PathBuf,
    pub total: Duration,
}

/// The plugins that served a run: each one's identity and hashes, and the lock.
#[derive(Debug, Clone, Default)]
pub struct PluginSetSummary {
    /// In stage order within each kind (manifest `order`, then name).
    pub plugins: Vec<UsedPlugin>,
    /// The lock the set was checked against, if any.
    pub lock: Option<PathBuf>,
    /// `--locked`: a difference from the lock would have stopped the run.
    pub locked: bool,
    /// Differences from the lock, one sentence each (drift warnings).
    pub drift: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct UsedPlugin {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    pub backends: String,
    pub order: i32,
    pub component_sha256: String,
    pub manifest_sha256: String,
    /// The folder its `plugin.toml` is in.
    pub folder: PathBuf,
}

impl PluginSetSummary {
    /// The plugins of `loaded` that serve `backend` (an installed hfx loads every backend's).
    pub fn of(loaded: &LoadedSet, backend: Backend, locked: bool) -> Self {
        let mut plugins: Vec<UsedPlugin> = loaded
            .set
            .plugins
            .iter()
            .filter(|p| p.manifest.plugin.backend.serve(backend))
            .map(|p| UsedPlugin {
                name: p.name().to_string(),
                version: p.manifest.plugin.version.clone(),
                kind: p.kind(),
                backends: p.manifest.plugin.backend.to_string(),
                order: p.manifest.plugin.order,
                component_sha256: p.component_sha256.clone(),
                manifest_sha256: p.manifest_sha256.clone(),
                folder: p.dir.clone(),
            })
            .collect();
        plugins.sort_by(|a, b| {
            (stage_rank(a.kind), a.order, &a.name).cmp(&(stage_rank(b.kind), b.order, &b.name))
        });
        PluginSetSummary { plugins, lock: loaded.lock.clone(), locked, drift: loaded.drift.clone() }
    }
}

/// Where a kind's plugins run in the pipeline: patches at trace time, then
/// the FX stages, then the ONNX ones.
fn stage_rank(kind: PluginKind) -> u8 {
    match kind {
        PluginKind::Patch => 0,
        PluginKind::FxProgramFix => 1,
        PluginKind::FxNodeFix => 2,
        PluginKind::OnnxTranslation => 3,
        PluginKind::OnnxIrFix => 4,
    }
}

/// What the run ran against.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// The Python the worker runs (and upstream versions are asked of).
    pub interpreter: String,
    /// The worker's Python version, as its `hello` reported it (None when no
    /// worker ran: an export of a file, not verified).
    pub python: Option<String>,
    /// The upstream versions the plugin set was resolved against: what the
    /// worker (or the Python asked) reported, with `--target`s over them.
    pub upstream: Versions,
    /// The packages whose version a `--target` gave.
    pub targets: Vec<String>,
}

impl Environment {
    pub fn of(python: Option<String>, loaded: &LoadedSet, set: &SetOptions) -> Self {
        Environment {
            interpreter: set.python(),
            python,
            upstream: loaded.set.upstream.clone(),
            targets: set.targets.iter().map(|(package, _)| package.clone()).collect(),
        }
    }
}

/// One exported program, from its trace (or file) to its artifact.
pub struct Component {
    /// `model`, or a generation component's name (`prefill`, `decode`).
    pub name: String,
    pub trace: Option<TraceSummary>,
    /// The reference's `ExportMetadata` fields the trace recorded (traced runs).
    pub metadata: Option<serde_json::Value>,
    /// Input axes torch.export fixed although a dynamic export asked them to vary.
    pub fixed_axes: Vec<FixedAxis>,
    /// An ExecuTorch program's input axes bounded before its stages: what its
    /// memory is planned for (`executorch::bounds::declare`).
    pub declared_bounds: Vec<crate::executorch::bounds::Declared>,
    /// Where the eager reference went (traced runs).
    pub reference: Option<PathBuf>,
    pub read: Duration,
    pub nodes_before: usize,
    pub nodes_after: usize,
    /// Every stage that ran plugins, in order.
    pub stages: Vec<StageReport>,
    /// The generic ONNX passes and the model's node count after them.
    pub optimized: Option<(OptimizeReport, usize)>,
    /// What the `.pte`'s lowering made of the program.
    pub lowered: Option<Lowered>,
    pub verified: Vec<Check>,
    /// `--verify-layers N`: `verified` are the checks of the model's first N
    /// layers (a truncated config over the same checkpoint), not of the model.
    pub verified_layers: Option<u32>,
    /// The emit step, verification included ([`Component::verify`]).
    pub emit: Duration,
    /// A `.pt2`'s weight entries written while the worker traced (kept by the emit step).
    pub weights_prewritten: usize,
    /// The trace's size guards the artifact checks at run time (an ONNX model's).
    pub guards_checked: Vec<String>,
    /// The artifact run in its runtime against eager (`--verify`).
    pub verify: Duration,
    /// The artifact as the worker runs it (not for IR JSON).
    pub artifact: Option<VerifyModel>,
    /// The runtime the artifact runs in, with what its tolerance depends on
    /// (not for IR JSON).
    pub runtime: Option<verify::Runtime>,
}

impl RunSummary {
    /// The single program's summary (`model`), for callers that run one.
    pub fn single(&self) -> Option<&Component> {
        match self.components.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// Prints the summary ([`RunSummary::write`]) on stdout.
    pub fn print(&self, verbose: u8) {
        let mut out = String::new();
        self.write(&mut out, verbose).expect("writing to a String");
        print!("{out}");
    }

    /// The summary's lines: each component's stages, then what was written;
    /// with `verbose`, why each skipped plugin was.
    pub fn write(&self, out: &mut impl Write, verbose: u8) -> std::fmt::Result {
        if let Some(first) = self.trace_shared_with {
            writeln!(out, "trace: the {first} export's (one trace for every backend of the run)")?;
        }
        let many = self.components.len() > 1;
        for component in &self.components {
            if many {
                writeln!(out, "component {}", component.name)?;
            }
            component.write(out)?;
        }
        if let Some(check) = &self.generation {
            super::generation::write(out, &check.reply, &check.tolerance)?;
        }
        if !self.skipped.is_empty() {
            writeln!(out, "skipped plugins: {}", self.skipped.len())?;
            if verbose > 0 {
                for s in &self.skipped {
                    writeln!(
                        out,
                        "  {} {}: {}",
                        s.found.manifest.plugin.name, s.found.manifest.plugin.version, s.reason
                    )?;
                }
            }
        }
        let nodes: Vec<String> = self
            .components
            .iter()
            .map(|c| {
                if many {
                    format!("{} {} -> {}", c.name, c.nodes_before, c.nodes_after)
                } else {
                    format!("{} -> {}", c.nodes_before, c.nodes_after)
                }
            })
            .collect();
        writeln!(
            out,
            "nodes: {}; wrote {} in {:.1} s",
            nodes.join(", "),
            self.written.display(),
            self.total.as_secs_f64()
        )?;
        Ok(())
    }
}

/// An ExecuTorch arena this many times its weights, and past
/// [`ARENA_WARNING_FLOOR`], is warned about: the program's memory is then
/// mostly what its dynamic sizes were planned for.
const ARENA_WARNING_RATIO: u64 = 4;
const ARENA_WARNING_FLOOR: u64 = 16 << 20;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

impl Component {
    /// The `.pte`'s planned memory next to its weights (a delegated
    /// program's weights are inside its payload: the file's size), what it
    /// was planned for, and a warning when it dwarfs them.
    fn write_memory(&self, out: &mut impl Write, lowered: &Lowered) -> std::fmt::Result {
        let (arena, weights, what) = match lowered {
            Lowered::Portable { emitted, .. } => {
                (emitted.arena, emitted.written.constant_bytes, "weights")
            }
            Lowered::Delegated(l) => (l.arena_bytes, l.bytes, "program"),
        };
        let bounds: Vec<String> = self.declared_bounds.iter().map(ToString::to_string).collect();
        let planned =
            if bounds.is_empty() { String::new() } else { format!(" for {}", bounds.join(", ")) };
        writeln!(out, "  memory: arena {} planned{planned}; {what} {}", mib(arena), mib(weights))?;
        if arena > ARENA_WARNING_FLOOR && arena > ARENA_WARNING_RATIO * weights {
            writeln!(out,
                "  warning: the arena ({}) is {}x the {what} ({}): declare smaller maxima with --dynamic-shapes INPUT:AXIS=MIN..MAX, or export --static",
                mib(arena), arena / weights.max(1), mib(weights)
            )?;
        }
        Ok(())
    }

    fn write(&self, out: &mut impl Write) -> std::fmt::Result {
        if let Some(Lowered::Portable { edge, emitted, emit }) = &self.lowered {
            writeln!(
                out,
                "stage {:<18} {:>8.2} s   ExecuTorch's edge decomposition (worker)",
                "edge-decompose", edge.seconds
            )?;
            writeln!(out,
                "stage {:<18} {:>8.2} ms  {} kernel call(s), {} operator(s), {} value(s); planned arena {} bytes; {} bytes ({} of constants)",
                "pte-emit",
                emit.as_secs_f64() * 1e3,
                emitted.instructions,
                emitted.operators,
                emitted.values,
                emitted.arena,
                emitted.written.bytes,
                emitted.written.constant_bytes
            )?;
        }
        if let Some(lowered) = &self.lowered {
            self.write_memory(out, lowered)?;
        }
        if let Some(Lowered::Delegated(l)) = &self.lowered {
            writeln!(out,
                "stage {:<18} {:>8.2} s   edge + partitioner {:.2} s ({} partition(s), {} replayed; {} retrace(s) that change nothing and {} repeated check(s) skipped), to_executorch {:.2} s; delegated {} node(s), {} portable kernel call(s); {} bytes",
                "lower",
                l.edge_seconds + l.executorch_seconds,
                l.edge_seconds,
                l.partitions,
                l.partitions_replayed,
                l.retraces_skipped,
                l.checks_skipped,
                l.executorch_seconds,
                l.delegated_nodes,
                l.portable_nodes,
                l.bytes
            )?;
        }
        if let Some((o, nodes)) = &self.optimized {
            writeln!(out,
                "stage {:<18} Identity nodes removed {}, duplicates merged {}, nodes folded {}, no-op nodes removed {}, pairs merged {}, \
                 weights stored transposed {}, nodes taking grouped weights apart removed {}, gathers over index grids sliced {}, batch norms and pads fused into convolutions {}, constants lifted {}, dead nodes removed {}; {nodes} nodes",
                "onnx-optimize",
                o.identities_removed,
                o.merged,
                o.folding.folded,
                o.folding.identities,
                o.folding.merged_pairs,
                o.folding.transposed,
                o.folding.slab_nodes,
                o.folding.index_grids,
                o.folding.fused.batch_norms + o.folding.fused.pads,
                o.folding.lifted,
                o.dead_removed,
            )?;
        }
        if let Some((o, _)) = self.optimized.as_ref().filter(|(o, _)| o.quantized.scheme.is_some())
        {
            writeln!(out, "{}", o.quantized.line())?;
        }
        if let Some((o, _)) = self.optimized.as_ref().filter(|(o, _)| o.compressed.dtype.is_some())
        {
            writeln!(out, "{}", o.compressed.line())?;
        }
        if let Some(layers) = self.verified_layers {
            writeln!(out, "verified on the model's first {layers} layers (--verify-layers: its config truncated, the same checkpoint), not the whole model:")?;
        }
        if let Some(runtime) = self.runtime.clone() {
            verify::write(out, &self.verified, &runtime)?;
        }
        if !self.verified.is_empty() && self.trace.as_ref().is_some_and(|t| t.cached.is_some()) {
            // The second size is run on the model the worker traced, which a cache hit never builds.
            writeln!(out, "  (the program came from the trace cache: checked on its recorded inputs only; a run that traces also checks a dynamic export at a second size)")?;
        }
        if let Some(t) = &self.trace {
            write_trace(out, t, self.reference.as_deref(), &self.guards_checked)?;
        }
        if !self.fixed_axes.is_empty() {
            let axes: Vec<String> = self
                .fixed_axes
                .iter()
                .map(|f| format!("{}[{}] = {}", f.input, f.axis, f.size))
                .collect();
            writeln!(out,
                "  fixed by torch.export in a dynamic export: {} (the model's code depends on these sizes; the exported model accepts only them)",
                axes.join(", ")
            )?;
        }
        writeln!(
            out,
            "stage {:<18} {:>8.2} ms  {} nodes",
            "read",
            self.read.as_secs_f64() * 1e3,
            self.nodes_before
        )?;
        for report in &self.stages {
            writeln!(
                out,
                "stage {:<18} {:>8.2} ms  dead code removed: {}",
                report.stage,
                report.elapsed.as_secs_f64() * 1e3,
                report.dead_code_removed
            )?;
            for (plugin, c) in &report.plugins {
                writeln!(
                    out,
                    "  {plugin:<30} calls {:>5}  changed {:>5}  failed {:>3}",
                    c.calls, c.changed, c.failed
                )?;
            }
        }
        match self.weights_prewritten {
            0 => writeln!(out, "stage {:<18} {:>8.2} ms", "emit", self.emit.as_secs_f64() * 1e3)?,
            n => writeln!(
                out,
                "stage {:<18} {:>8.2} ms  ({n} weight entries written while torch.export ran)",
                "emit",
                self.emit.as_secs_f64() * 1e3
            )?,
        }
        Ok(())
    }
}

fn write_trace(
    out: &mut impl Write,
    t: &TraceSummary,
    reference: Option<&std::path::Path>,
    guards_checked: &[String],
) -> std::fmt::Result {
    let from = t.hub.as_ref().map_or_else(String::new, |hub| format!(" from {hub}"));
    let reference = match reference {
        Some(path) => format!("eager reference: {}", path.display()),
        None if t.weights.streamed && !t.weights.loaded => {
            "no eager reference (weights not read; --verify reads them)".to_string()
        }
        None => "eager reference not kept (--verify or --keep-reference keeps it)".to_string(),
    };
    match &t.cached {
        Some(entry) => writeln!(
            out,
            "traced {}{from} (the trace cache's {}: not traced again); {reference}",
            t.model_class,
            entry.display()
        )?,
        None => writeln!(out, "traced {}{from} in {:.1} s; {reference}", t.model_class, t.seconds)?,
    }
    match (&t.weights.fallback, t.weights.streamed) {
        (_, true) => writeln!(
            out,
            "  weights: streamed from the model folder's checkpoint into the artifact{}",
            if t.weights.loaded {
                " (read once for the eager reference)"
            } else {
                ", never read by the worker"
            }
        )?,
        (Some(why), false) => writeln!(out, "  weights: read into the worker: {why}")?,
        (None, false) => {}
    }
    if t.weights.caller_memory {
        writeln!(
            out,
            "  weights: read from the caller's tensors in shared memory, never copied to a file"
        )?;
    }
    let (seconds, peaks) = (&t.times, &t.peaks);
    writeln!(out,
        "stage {:<18} {:>8.2} s   import {:.2} s, build {:.2} s, eager {:.2} s, torch.export {:.2} s, save {:.2} s{}; {} output(s)",
        "trace",
        t.seconds,
        seconds.import,
        seconds.build,
        seconds.eager,
        seconds.export,
        seconds.save,
        if t.side_weights { " (weights beside the program)" } else { "" },
        t.outputs
    )?;
    writeln!(out,
        "  worker peak RSS {:.0} MiB (after import {:.0}, build {:.0}, torch.export {:.0}, save {:.0})",
        peaks.save, peaks.import, peaks.build, peaks.export, peaks.save
    )?;
    for (plugin, calls) in &t.patched {
        writeln!(out, "  patch {plugin:<30} answered {calls} call(s)")?;
    }
    if t.patch_calls_cached > 0 {
        writeln!(out, "  patched calls answered from the worker's cache (described as a call a plugin answered): {}", t.patch_calls_cached)?;
    }
    // No translation or fix handles these: torch's default table decomposed them.
    for d in &t.decomposed {
        writeln!(out, "  decomposed {:<30} {} node(s) into {} node(s)", d.op, d.nodes, d.became)?;
    }
    if !t.tied_axes.is_empty() {
        let tied: Vec<String> = t
            .tied_axes
            .iter()
            .map(|t| format!("{}:{} tied to {}:{}", t.input, t.axis, t.to_input, t.to_axis))
            .collect();
        writeln!(out, "  dynamic shapes: {} (the model needs them equal)", tied.join(", "))?;
    }
    // A `.pt2` or `.pte` cannot check these: a size breaking one runs and
    // computes wrong values. An ONNX model checks those it can read.
    // The guard named is one the artifact does not check, where there is one.
    let unchecked = t.size_guards.iter().find(|g| !guards_checked.contains(&g.guard));
    if let Some(first) = unchecked.or(t.size_guards.first()) {
        let at: Vec<String> =
            first.breaks_at.iter().map(|(input, shape)| format!("{input} {shape:?}")).collect();
        let more = match t.size_guards.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more guard(s) sizes break)"),
        };
        let checked = if guards_checked.contains(&first.guard) {
            "which the ONNX model checks at run time (ONNX Runtime stops with an error naming the guard)"
        } else {
            "which the artifact does not check (it may run and compute wrong values)"
        };
        writeln!(
            out,
            "  valid only where torch.export's guard `{}` holds: it breaks at {}, {checked}{more}",
            first.guard,
            at.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::PluginCounts;
    use crate::trace::protocol::{ComponentCalls, GenaiTokens, GenerateCheckReply, GenerateStep};

    fn component(name: &str, nodes: (usize, usize)) -> Component {
        Component {
            name: name.into(),
            trace: None,
            metadata: None,
            fixed_axes: Vec::new(),
            declared_bounds: Vec::new(),
            reference: None,
            read: Duration::from_micros(12_500),
            nodes_before: nodes.0,
            nodes_after: nodes.1,
            stages: Vec::new(),
            optimized: None,
            lowered: None,
            verified: Vec::new(),
            verified_layers: None,
            emit: Duration::from_millis(3),
            weights_prewritten: 0,
            guards_checked: Vec::new(),
            verify: Duration::ZERO,
            artifact: None,
            runtime: None,
        }
    }

    fn summary(components: Vec<Component>) -> RunSummary {
        RunSummary {
            components,
            generation: None,
            backend: Backend::Onnx,
            trace_shared_with: None,
            plugin_set: PluginSetSummary::default(),
            environment: Environment::default(),
            skipped: Vec::new(),
            written: "out/model.onnx".into(),
            total: Duration::from_millis(2_450),
        }
    }

    fn written(summary: &RunSummary) -> String {
        let mut out = String::new();
        summary.write(&mut out, 0).unwrap();
        out
    }

    /// A `.pte`'s arena is printed next to its weights with the bounds it
    /// was planned for; one that dwarfs them is warned about in one line.
    #[test]
    fn an_executorch_arena_is_shown_next_to_its_weights_and_warned_about_past_a_ratio() {
        use crate::executorch::bounds::Declared;
        let portable = |arena: u64, constants: u64| {
            let mut one = component("model", (40, 38));
            one.declared_bounds =
                vec![Declared { axis: "batch", max: 4 }, Declared { axis: "sequence", max: 64 }];
            one.lowered = Some(Lowered::Portable {
                edge: EdgeProgramReply {
                    in_spec: String::new(),
                    out_spec: String::new(),
                    seconds: 0.5,
                    side_weights: true,
                },
                emitted: crate::executorch::Emitted {
                    instructions: 10,
                    operators: 3,
                    values: 20,
                    arena,
                    written: crate::executorch::write::Written {
                        bytes: constants + 4096,
                        program_bytes: 4096,
                        constant_bytes: constants,
                    },
                },
                emit: Duration::from_millis(5),
            });
            written(&summary(vec![one]))
        };
        let small = portable(933_888, 107_328);
        assert!(
            small.contains(
                "  memory: arena 0.9 MiB planned for batch <= 4, sequence <= 64; weights 0.1 MiB\n"
            ),
            "{small}"
        );
        assert!(!small.contains("warning"), "a small arena is no concern: {small}");
        let large = portable(889 << 20, 400 << 10);
        let warning: Vec<&str> = large.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(
            warning,
            ["  warning: the arena (889.0 MiB) is 2275x the weights (0.4 MiB): declare smaller maxima with --dynamic-shapes INPUT:AXIS=MIN..MAX, or export --static"],
            "{large}"
        );
    }

    #[test]
    fn a_component_reports_each_stage_and_its_plugins_then_what_was_written() {
        let mut one = component("model", (40, 38));
        let mut fixes = StageReport {
            stage: "fx-node-fixes",
            dead_code_removed: 2,
            elapsed: Duration::from_micros(1_250),
            ..Default::default()
        };
        fixes.plugins.insert("fix-a".into(), PluginCounts { calls: 3, changed: 1, failed: 0 });
        one.stages.push(fixes);
        one.weights_prewritten = 5;
        one.fixed_axes.push(FixedAxis { input: "input_ids".into(), axis: 1, size: 8 });
        one.verified_layers = Some(2);
        let mut run = summary(vec![one]);
        run.trace_shared_with = Some(Backend::Dynamo);
        assert_eq!(
            written(&run),
            "trace: the dynamo export's (one trace for every backend of the run)\n\
             verified on the model's first 2 layers (--verify-layers: its config truncated, the same checkpoint), not the whole model:\n\
             \x20 fixed by torch.export in a dynamic export: input_ids[1] = 8 (the model's code depends on these sizes; the exported model accepts only them)\n\
             stage read                  12.50 ms  40 nodes\n\
             stage fx-node-fixes          1.25 ms  dead code removed: 2\n\
             \x20 fix-a                          calls     3  changed     1  failed   0\n\
             stage emit                   3.00 ms  (5 weight entries written while torch.export ran)\n\
             nodes: 40 -> 38; wrote out/model.onnx in 2.5 s\n"
        );
    }

    #[test]
    fn components_are_named_and_the_generation_check_follows_them() {
        let mut run = summary(vec![component("prefill", (10, 9)), component("decode", (12, 11))]);
        let reply = GenerateCheckReply {
            identical: true,
            teacher_forced: false,
            steps: vec![
                GenerateStep {
                    tokens: vec![5, 6],
                    eager_tokens: vec![5, 6],
                    max_abs: Some(2e-5),
                    ok: true,
                    against_float: None,
                },
                GenerateStep {
                    tokens: vec![7, 1],
                    eager_tokens: vec![7, 2],
                    max_abs: None,
                    ok: false,
                    against_float: None,
                },
            ],
            calls: vec![
                ComponentCalls { name: "prefill".into(), calls: 1, state_loads: None },
                ComponentCalls { name: "decode".into(), calls: 1, state_loads: Some(1) },
            ],
            providers: vec!["CPUExecutionProvider".into()],
            genai: Some(GenaiTokens {
                identical: false,
                tokens: vec![vec![5, 7], vec![6, 1]],
                eager_tokens: vec![vec![5, 7], vec![6, 2]],
            }),
        };
        let tolerance = super::super::generation::held_to(1e-3, None, false);
        run.generation = Some(super::super::generation::Checked { reply, tolerance });
        assert_eq!(
            written(&run),
            "component prefill\n\
             stage read                  12.50 ms  10 nodes\n\
             stage emit                   3.00 ms\n\
             component decode\n\
             stage read                  12.50 ms  12 nodes\n\
             stage emit                   3.00 ms\n\
             generate 2 greedy token(s) x 2 row(s): identical to eager `generate` (component calls: prefill 1, decode 1 (cache loaded into its state 1); logits max abs error 2.00e-5; CPUExecutionProvider)\n\
             \x20 held to: atol/rtol 1e-3 on each step's logits, identical greedy tokens\n\
             \x20 token 1   [5, 6]  logits max abs 2.00e-5\n\
             \x20 token 2   [7, 1] (eager [7, 2])  logits max abs not finite  MISMATCH\n\
             genai 2 greedy token(s) x 2 row(s) from ONNX Runtime GenAI's `Generator`: DIFFERENT from eager `generate`\n\
             \x20 greedy-token agreement 0.75 (3 of 4, each row up to its first difference)\n\
             \x20 row 1   [5, 7]\n\
             \x20 row 2   [6, 1] (eager [6, 2])\n\
             nodes: prefill 10 -> 9, decode 12 -> 11; wrote out/model.onnx in 2.5 s\n"
        );
    }

    #[test]
    fn plugins_are_listed_in_stage_order() {
        let kinds = [
            PluginKind::OnnxIrFix,
            PluginKind::FxNodeFix,
            PluginKind::Patch,
            PluginKind::OnnxTranslation,
            PluginKind::FxProgramFix,
        ];
        let mut sorted = kinds.to_vec();
        sorted.sort_by_key(|&k| stage_rank(k));
        assert_eq!(
            sorted,
            [
                PluginKind::Patch,
                PluginKind::FxProgramFix,
                PluginKind::FxNodeFix,
                PluginKind::OnnxTranslation,
                PluginKind::OnnxIrFix
            ]
        );
    }
}
