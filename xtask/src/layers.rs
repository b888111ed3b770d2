//! The layering ARCHITECTURE.md states, checked: no import cycle among the
//! host's modules (`host/src`, one module per file; `crate::`, `super::` and
//! `self::` paths) nor among the worker's (`host/worker/hfx_worker`, imports
//! anywhere in a file, function-local ones included). A parent module that
//! declares or re-exports its children is not a cycle: an edge between a
//! module and its own ancestor or descendant does not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Edges = BTreeMap<String, BTreeSet<String>>;

/// The strongly connected components of more than one module (each a cycle).
fn cycles(edges: &Edges) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !tarjan.index.contains_key(v.as_str()) {
            tarjan.visit(v);
        }
    }
    tarjan.found
}

fn is_related(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

/// The files of `dir` (at any depth) ending in `extension`.
fn source_files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    crate::code_map::files(dir, &[extension]).into_iter().map(|file| dir.join(file)).collect()
}

/// The module a `crate::`/`super::`/`self::` path names, from module `current`.
fn resolve(modules: &BTreeSet<String>, current: &str, path: &[&str]) -> Option<String> {
    let mut base: Vec<&str> =
        if current.is_empty() { Vec::new() } else { current.split("::").collect() };
    let mut rest = path;
    match *rest.first()? {
        "crate" => {
            base.clear();
            rest = &rest[1..];
        }
        "self" => rest = &rest[1..],
        "super" => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    (0..=rest.len()).rev().find_map(|take| {
        let candidate = base.iter().chain(&rest[..take]).copied().collect::<Vec<_>>().join("::");
        modules.contains(&candidate).then_some(candidate)
    })
}

fn rust_edges(src: &Path) -> Edges {
    let mut files = BTreeMap::new();
    for path in source_files(src, ".rs") {
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> =
            relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
            parts.pop();
        }
        files.insert(parts.join("::"), path);
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut edges = Edges::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap();
            // A path's own `super::super::` is not a second path.
            let mut consumed = 0;
            for (start, _) in code.match_indices(['c', 's']) {
                let head = &code[start..];
                let boundary = start == 0
                    || !code[..start].ends_with(|c: char| c.is_alphanumeric() || c == '_');
                if start < consumed
                    || !boundary
                    || !(head.starts_with("crate::")
                        || head.starts_with("super::")
                        || head.starts_with("self::"))
                {
                    continue;
                }
                let path: &str = head
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap();
                consumed = start + path.len();
                let path: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                if let Some(target) = resolve(&modules, module, &path) {
                    if !module.is_empty() && !target.is_empty() && !is_related(module, &target) {
                        edges.entry(module.clone()).or_default().insert(target);
                    }
                }
            }
        }
        edges.entry(module.clone()).or_default();
    }
    edges
}

/// The worker package's modules each module imports: `from . import x`,
/// `from .x import y`, `from hfx_worker.x import y`, `import hfx_worker.x`,
/// wherever they are written.
fn python_edges(package: &Path) -> Edges {
    let name = package.file_name().unwrap().to_string_lossy().into_owned();
    let modules: BTreeSet<String> = source_files(package, ".py")
        .iter()
        .filter(|p| p.parent() == Some(package))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut edges = Edges::new();
    for module in &modules {
        let text = std::fs::read_to_string(package.join(format!("{module}.py"))).unwrap();
        let mut targets = BTreeSet::new();
        // Parenthesized imports span lines: join them first.
        let joined = text.replace("(\n", "(").replace(",\n", ",");
        for line in joined.lines() {
            let words: Vec<&str> =
                line.trim().split([' ', ',', '(', ')']).filter(|w| !w.is_empty()).collect();
            match words.as_slice() {
                ["from", source, "import", names @ ..] => {
                    let source = source
                        .strip_prefix(&format!("{name}."))
                        .or_else(|| (*source == name).then_some("").or(source.strip_prefix('.')));
                    match source {
                        Some("") | Some(".") => targets
                            .extend(names.iter().filter(|n| **n != "as").map(|n| n.to_string())),
                        Some(inner) => {
                            targets.insert(inner.split('.').next().unwrap().to_string());
                        }
                        None => {}
                    }
                }
                ["import", names @ ..] => {
                    for n in names {
                        if let Some(inner) = n.strip_prefix(&format!("{name}.")) {
                            targets.insert(inner.split('.').next().unwrap().to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        let targets = targets
            .into_iter()
            .filter(|t| modules.contains(t) && t != module && t != "__init__")
            .collect();
        if module != "__init__" {
            edges.insert(module.clone(), targets);
        }
    }
    edges
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn described(found: &[Vec<String>]) -> String {
    found.iter().map(|c| c.join(" <-> ")).collect::<Vec<_>>().join("; ")
}

#[test]
fn the_hosts_modules_import_one_way() {
    let found = cycles(&rust_edges(&root().join("host/src")));
    assert!(found.is_empty(), "import cycles in host/src: {}", described(&found));
}

#[test]
fn the_workers_modules_import_one_way() {
    let found = cycles(&python_edges(&root().join("host/worker/hfx_worker")));
    assert!(found.is_empty(), "import cycles in the worker: {}", described(&found));
}

#[test]
fn a_cycle_at_any_depth_is_found() {
    let edges: Edges = [("a", &["b"][..]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]
        .into_iter()
        .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
        .collect();
    assert_eq!(cycles(&edges), [["a", "b", "c"]]);
    let dir = tempfile_dir();
    std::fs::write(dir.join("a.py"), "def f():\n    from .b import g\n").unwrap();
    std::fs::write(dir.join("b.py"), "from hfx_worker import (\n    a,\n)\n").unwrap();
    std::fs::write(dir.join("c.py"), "import hfx_worker.a\n").unwrap();
    assert_eq!(cycles(&python_edges(&dir)), [["a", "b"]]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh folder named as the worker package, in the temp folder.
fn tempfile_dir() -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("hfx-layers-{}", std::process::id())).join("hfx_worker");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
