//! The IR's layering, checked on its sources: the graph knows the worker,
//! plugins, stages, backends and the pipeline not at all. It may use the
//! file IO below it (`atomic`, `input`) and `weights`.

use std::path::Path;

/// The crate's modules the graph must never name.
const ABOVE: [&str; 9] =
    ["trace", "plugins", "pipeline", "stages", "onnx", "executorch", "selftest", "report", "cli"];

/// The paths in `source` (the file of module `module`, `["graph", "pt2"]`)
/// that name a module of [`ABOVE`]: `crate::x`, `crate::{x, ..}`, or
/// `super::` climbing out to the crate root. Comments are not code.
fn paths_above(module: &[&str], source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
            if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // `hfx_crate::`, a longer name
            }
            let mut rest = &code[at..];
            let mut climbed = 0;
            let root = if rest.starts_with("crate::") {
                rest = &rest["crate::".len()..];
                true
            } else {
                while let Some(r) = rest.strip_prefix("super::") {
                    climbed += 1;
                    rest = r;
                }
                climbed >= module.len()
            };
            if !root || (at > 0 && code[..at].ends_with("::")) {
                continue;
            }
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name = name.trim();
                let first = name.split(|c: char| !(c.is_alphanumeric() || c == '_')).next();
                if first.is_some_and(|f| ABOVE.contains(&f)) {
                    found.push(code.trim().to_string());
                }
            }
        }
    }
    found
}

/// Every `.rs` file under `dir`, with its module path from `module`.
fn sources(dir: &Path, module: Vec<String>, out: &mut Vec<(Vec<String>, std::path::PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            sources(&path, [module.clone(), vec![name]].concat(), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let own =
                if name == "mod" { module.clone() } else { [module.clone(), vec![name]].concat() };
            out.push((own, path));
        }
    }
}

#[test]
fn the_graph_names_no_module_above_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/graph");
    let mut files = Vec::new();
    sources(&dir, vec!["graph".into()], &mut files);
    assert!(files.len() > 10, "the graph's sources are read: {files:?}");
    let mut above = Vec::new();
    for (module, path) in files {
        let module: Vec<&str> = module.iter().map(String::as_str).collect();
        if module == ["graph", "layering"] {
            continue; // this checker's own examples
        }
        let source = std::fs::read_to_string(&path).unwrap();
        above.extend(
            paths_above(&module, &source).into_iter().map(|p| format!("{}: {p}", path.display())),
        );
    }
    assert!(above.is_empty(), "the graph IR names modules above it:\n{}", above.join("\n"));
}

#[test]
fn paths_above_the_graph_are_found_however_written() {
    let found = |module: &[&str], source: &str| paths_above(module, source).len();
    assert_eq!(found(&["graph", "pt2"], "use crate::trace::protocol::PlannedWeight;"), 1);
    assert_eq!(found(&["graph", "pt2"], "use crate::{graph::Dim, onnx::emit};"), 1);
    assert_eq!(found(&["graph"], "let p = super::plugins::Plugin::new();"), 1);
    assert_eq!(found(&["graph", "pt2", "archive"], "use super::super::super::stages;"), 1);
    // Inside the graph, or below it, or in a comment: not above.
    assert_eq!(found(&["graph", "pt2", "archive"], "use super::super::Dim;"), 0);
    assert_eq!(found(&["graph", "pt2"], "use crate::weights::cast::Cast; // not crate::onnx"), 0);
    assert_eq!(found(&["graph"], "use crate::atomic::DirectWriter;"), 0);
}
