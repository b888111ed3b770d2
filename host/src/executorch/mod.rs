//! The native portable `.pte` emitter (`--backend executorch`, no delegate).
//!
//! The worker decomposes hfx's fixed program with ExecuTorch's edge
//! decomposition table (core ATen; `trace/worker/hfx_worker/lower.py`,
//! `edge_program`); everything after that is here, in Rust: `lower` (ops to
//! their portable kernels, arguments by schema, views as aliases, sizes as
//! upper bounds), `memory` (the arena plan), `write` (the FlatBuffer, its
//! header and the constant segment). `kernels.json` is generated from the
//! pinned torch and ExecuTorch by `tools/executorch-kernels.py`;
//! `program_generated.rs` by the wheel's flatc from `program.fbs`. Both are
//! committed, never edited.

pub mod bounds;
pub mod kernels;
pub mod lower;
pub mod memory;
#[allow(clippy::all, unused_imports, dead_code, non_snake_case, non_camel_case_types, deprecated, mismatched_lifetime_syntaxes, unsafe_op_in_unsafe_fn)]
#[rustfmt::skip]
mod program_generated;
pub mod write;

use std::path::Path;

use anyhow::{Context, Result};

use crate::graph::pt2::{Pt2, Source};
use crate::graph::Graph;
use crate::trace::protocol::MemoryPlanning;

/// What the emitter made.
#[derive(Debug, Clone, PartialEq)]
pub struct Emitted {
    pub instructions: usize,
    pub operators: usize,
    pub values: usize,
    /// Bytes of the planned arena (memory id 1).
    pub arena: u64,
    pub written: write::Written,
}

/// Emits the edge program `graph` (read from `pt2`, whose weights it streams)
/// as a portable `.pte` at `path`, its arena holding what `memory` says, with `provenance` (JSON) as named data.
pub fn emit(
    pt2: &Pt2,
    graph: &Graph,
    specs: write::Specs,
    memory: MemoryPlanning,
    provenance: &[u8],
    path: &Path,
) -> Result<Emitted> {
    let model = pt2.programs.get("model").context("the edge program has no `model`")?;
    let program = lower::lower(graph, &model.graph_module.signature, memory)?;
    let plan = memory::plan(&program);
    let slices: Vec<write::ConstantBytes> = program
        .constants
        .iter()
        .map(|c| match c {
            lower::Constant::Archive { fqn, lifted, meta } => {
                match pt2.contiguous_tensor(fqn, *lifted, meta)?.source {
                    Source { bytes, cast: None } => {
                        Ok(write::ConstantBytes { bytes, origin: pt2.origin(bytes) })
                    }
                    _ => Err(anyhow::anyhow!("weight `{fqn}` is not a slice of the archive")),
                }
            }
            lower::Constant::Scalar(bytes) => {
                Ok(write::ConstantBytes { bytes: bytes.as_slice(), origin: None })
            }
        })
        .collect::<Result<_>>()?;
    let written = write::write(&program, &plan, &slices, specs, provenance, path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Emitted {
        instructions: program.chain.len(),
        operators: program.operators.len(),
        values: program.values.len(),
        arena: plan.arena,
        written,
    })
}
