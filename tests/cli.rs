//! The `hfx` binary as a user runs it.

mod common;

use std::process::Command;

use common::*;

const EXAMPLE: &str = "examples/graphs/dynamic-batch-sort.json";

fn hfx(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hfx")).args(args).current_dir(root()).env("HFX_CACHE_DIR", cache_dir()).output().unwrap()
}

fn cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("hfx-cli-test-cache-{}", std::process::id()))
}

#[test]
fn example_graph_is_current() {
    // HFX_BLESS=1 rewrites the example from the builder above.
    let path = root().join(EXAMPLE);
    let expected = example_graph().to_json();
    if std::env::var_os("HFX_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &expected).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), expected, "run with HFX_BLESS=1 to update {EXAMPLE}");
}

#[test]
fn plugins_list_shows_name_version_kind_backend_targets_and_hash() {
    plugin_dir("plugins/onnx/fix-alias");
    let out = hfx(&["plugins", "list", "--plugins", "plugins/onnx"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let alias = text.lines().find(|l| l.starts_with("onnx-fix-alias ")).unwrap();
    let columns: Vec<&str> = alias.split_whitespace().collect();
    assert_eq!(&columns[..4], ["onnx-fix-alias", "1.0.0", "fx-node-fix", "onnx"]);
    let found = discover_one(&plugin_dir("plugins/onnx/fix-alias")).unwrap();
    assert_eq!(columns[4], &found.component_sha256[..16]);
    assert_eq!(&columns[5..], ["active", "any", "aten.alias.default"]);
    for name in ["onnx-fix-assertion", "onnx-fix-sort-stable", "onnx-fix-topk-sorted"] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing:\n{text}");
    }
}

#[test]
fn fix_runs_the_onnx_fixes_on_the_example() {
    plugin_dir("plugins/onnx/fix-alias");
    let out_dir = tempfile::tempdir().unwrap();
    let output = out_dir.path().join("fixed.json");
    let out = hfx(&["run", "--backend", "onnx", "--plugins", "plugins/onnx", EXAMPLE, "-o", output.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(summary.contains("nodes: 5 -> 1"), "{summary}");
    let fixed = hfx::graph::Graph::from_json(&std::fs::read_to_string(&output).unwrap()).unwrap();
    assert_eq!(targets(&fixed), ["aten.sort.default"]);
}

#[test]
fn a_failing_plugin_leaves_the_previous_output_in_place() {
    plugin_dir("tests/plugins/hostile-panic");
    let out_dir = tempfile::tempdir().unwrap();
    let output = out_dir.path().join("fixed.json");
    std::fs::write(&output, "previous good output").unwrap();
    let graph = out_dir.path().join("relu.json");
    std::fs::write(&graph, relu_add_mul().0.to_json()).unwrap();
    let out = hfx(&[
        "run", "--backend", "onnx", "--plugins", "tests/plugins/hostile-panic",
        graph.to_str().unwrap(), "-o", output.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("plugin `test-hostile-panic` (fx-node-fix) failed in stage `fx-node-fixes` at node `relu`"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "previous good output");
    assert_eq!(std::fs::read_dir(out_dir.path()).unwrap().count(), 2, "no temp file left behind");
}

#[test]
fn a_bad_manifest_is_one_line_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("plugin.toml"), "[plugin]\nname = \"x\"\n").unwrap();
    let out = hfx(&["plugins", "list", "--plugins", tmp.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&dir.join("plugin.toml").display().to_string()) && stderr.contains("missing field"), "{stderr}");
}
