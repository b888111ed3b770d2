//! Self-tests a plugin ships: `selftest/*.json` in its folder, each an input
//! graph (the IR's JSON form) and what the plugin's stage must leave:
//!
//! ```json
//! { "input": { ...graph... },
//!   "expect-targets": ["aten.mul.Tensor"],
//!   "expect-ranges": { "s0": [2, 4096] } }
//! ```
//!
//! `hfx plugins verify` runs them. FX node fixes run through the node-fix
//! stage (dispatch, DCE), FX program fixes through the program-fix stage.
//! The folder is read through cap-std like everything else of a plugin.

use std::collections::BTreeMap;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::Deserialize;

use super::{fx_node_fix, fx_program_fix, OnPluginError};
use crate::graph::{Graph, RangeConstraint};
use crate::plugins::{LoadError, Plugin, PluginKind, Runtime};

const FOLDER: &str = "selftest";
/// A self-test case larger than this is refused before it is read.
pub const MAX_CASE_BYTES: u64 = 4 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Case {
    input: serde_json::Value,
    #[serde(default)]
    expect_targets: Option<Vec<String>>,
    #[serde(default)]
    expect_ranges: BTreeMap<String, (i64, Option<i64>)>,
}

#[derive(Debug)]
pub struct Outcome {
    pub case: String,
    /// None when the case passed.
    pub failure: Option<String>,
}

/// Runs every self-test of `plugin`; an unreadable case is a failure of that case.
pub fn run(runtime: &Runtime, plugin: &Plugin) -> Result<Vec<Outcome>, LoadError> {
    let dir = Dir::open_ambient_dir(&plugin.dir, ambient_authority()).map_err(|e| LoadError::new(&plugin.dir, e.to_string()))?;
    if !dir.is_dir(FOLDER) {
        return Ok(Vec::new());
    }
    let cases = dir.open_dir(FOLDER).map_err(|e| LoadError::new(plugin.dir.join(FOLDER), e.to_string()))?;
    let mut names: Vec<String> = cases
        .entries()
        .map_err(|e| LoadError::new(plugin.dir.join(FOLDER), e.to_string()))?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| {
            // Regular files only (a FIFO fails the case without blocking), bounded.
            let failure = crate::plugins::discover::read_regular(&cases, &name, MAX_CASE_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "is not UTF-8".to_string()))
                .and_then(|text| run_case(runtime, plugin, &text))
                .err();
            Outcome { case: format!("{FOLDER}/{name}"), failure: failure.map(|f| format!("{FOLDER}/{name}: {f}")) }
        })
        .collect())
}

fn run_case(runtime: &Runtime, plugin: &Plugin, text: &str) -> Result<(), String> {
    let case: Case = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut graph = Graph::from_json(&case.input.to_string()).map_err(|e| e.to_string())?;
    let result = match plugin.kind() {
        PluginKind::FxNodeFix => fx_node_fix::run(runtime, &[plugin], &mut graph, "selftest", OnPluginError::Fail),
        PluginKind::FxProgramFix => fx_program_fix::run(runtime, &[plugin], &mut graph, "selftest", OnPluginError::Fail),
        kind => return Err(format!("self-tests are not supported for {kind} plugins yet")),
    };
    result.map_err(|e| e.to_string())?;
    if let Some(expected) = case.expect_targets {
        let found: Vec<String> = graph.nodes().map(|n| graph.node(n).map(|n| n.target.clone()).unwrap_or_default()).collect();
        if found != expected {
            return Err(format!("expected targets {expected:?}, found {found:?}"));
        }
    }
    for (symbol, (min, max)) in case.expect_ranges {
        let found = graph.range_constraints().get(&symbol).copied();
        if found != Some(RangeConstraint { min, max }) {
            return Err(format!("expected range of {symbol} [{min}, {max:?}], found {found:?}"));
        }
    }
    Ok(())
}
