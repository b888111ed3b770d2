//! ARCHITECTURE.md's code map against the tree: every module of the host
//! (`host/src/**.rs`) and of the worker package (`host/worker/hfx_worker/`)
//! is named by its path, and every source path the document names exists.
//! A module added, moved or removed without its line in the map fails the
//! tests.

use std::path::{Path, PathBuf};

/// Files under `dir` whose name ends with one of `extensions`, as paths
/// relative to `dir` with `/` separators, sorted.
pub fn files(dir: &Path, extensions: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "__pycache__" && name != "target" {
                    pending.push(path);
                }
            } else if extensions.iter().any(|ext| name.ends_with(ext)) {
                let relative = path.strip_prefix(dir).unwrap();
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

/// The code spans (`` `...` ``) of a Markdown text.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn every_module_of_the_host_and_the_worker_is_in_the_code_map() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let named: std::collections::HashSet<&str> = code_spans(&text).into_iter().collect();
    let mut missing = Vec::new();
    for file in files(&root.join("host/src"), &[".rs"]) {
        if !named.contains(file.as_str()) {
            missing.push(format!("host/src/{file}"));
        }
    }
    for file in files(&root.join("host/worker/hfx_worker"), &[".py", ".json"]) {
        if !named.contains(file.as_str()) {
            missing.push(format!("host/worker/hfx_worker/{file}"));
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name {} (write each as `path/from/src.rs`: its role): {}",
        missing.len(),
        missing.join(", ")
    );
}

#[test]
fn every_source_path_the_architecture_names_exists() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let everything = files(&root, &[".rs", ".py", ".json", ".toml", ".wit", ".md", ".sh"]);
    let bases = ["", "host/src/", "host/worker/hfx_worker/"];
    let mut stale = Vec::new();
    for span in code_spans(&text) {
        let is_path = span.contains(['/', '.'])
            && span.chars().all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
            && [".rs", ".py", ".wit", ".sh"].iter().any(|ext| span.ends_with(ext));
        // The pinned reference's files live in the venv, not in this repository.
        if !is_path || span.starts_with("transformers/") {
            continue;
        }
        let exists = bases.iter().any(|base| root.join(format!("{base}{span}")).is_file())
            || everything.iter().any(|file| file.ends_with(&format!("/{span}")));
        if !exists {
            stale.push(span);
        }
    }
    stale.sort();
    stale.dedup();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names files that do not exist: {}",
        stale.join(", ")
    );
}
