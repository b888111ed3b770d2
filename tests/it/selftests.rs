//! Plugin self-tests: `hfx plugins capture` cuts a case out of a real trace,
//! `hfx plugins test` runs it through the plugin's stage and checks the result
//! numerically in the worker. The negative controls: a wrong fix and a wrong
//! translation, each well-formed, fail on the values; a case that does not
//! exercise its plugin fails; every plugin the project ships passes its own.

use std::path::{Path, PathBuf};

use crate::common::*;

/// A copy of the plugin folder `relative` (manifest, crate, component) in `dir`.
fn copy_plugin(relative: &str, dir: &Path) -> PathBuf {
    let from = plugin_dir(relative);
    let to = dir.join(from.file_name().unwrap());
    std::fs::create_dir_all(&to).unwrap();
    for file in ["plugin.toml", "Cargo.toml", "plugin.wasm"] {
        std::fs::copy(from.join(file), to.join(file)).unwrap();
    }
    to
}

/// `hfx plugins capture` of `target` in the test model `function` into `case`.
fn capture(dir: &Path, function: &str, target: &str, case: &Path) {
    let spec = format!("python:hfx_test_models:{function}");
    let out = hfx_with_python(dir, &["plugins", "capture", "--backend", "onnx", "--model-fn", &spec, "--node", target, "--case", case.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("1 node(s) around {target}, 1 input value(s)")), "{stdout}");
}

fn test(dir: &Path, folder: &Path) -> (bool, String) {
    let out = hfx_with_python(dir, &["plugins", "test", folder.to_str().unwrap()]);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn captured_cases_check_fixes_and_translations_on_real_values() {
    let dir = tempfile::tempdir().unwrap();
    let (right_fix, wrong_fix) = (copy_plugin("tests/plugins/kind-node-fix", dir.path()), copy_plugin("tests/plugins/fix-wrong", dir.path()));
    let relu = right_fix.join("selftest/relu.json");
    capture(dir.path(), "relu_silu", "aten.relu.default", &relu);
    let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&relu).unwrap()).unwrap();
    assert_eq!(case["values"]["x"]["tensor"]["shape"], serde_json::json!([3, 5]), "the trace's own input reached the piece");
    std::fs::create_dir_all(wrong_fix.join("selftest")).unwrap();
    std::fs::copy(&relu, wrong_fix.join("selftest/relu.json")).unwrap();

    let (ok, output) = test(dir.path(), &right_fix);
    assert!(ok && output.contains("graph edit(s); max abs error 0.0e0 on 1 output(s)"), "{output}");
    // The negative control: a fix that leaves a well-formed graph computing something else.
    let (ok, output) = test(dir.path(), &wrong_fix);
    assert!(!ok && output.contains("selftest/relu.json: output 0 differs by"), "{output}");

    // Translations: the same, in ONNX Runtime against PyTorch.
    let (right, wrong) = (copy_plugin("tests/plugins/kind-translation", dir.path()), copy_plugin("tests/plugins/translation-wrong", dir.path()));
    capture(dir.path(), "relu_silu", "aten.relu.default", &right.join("selftest/relu.json"));
    capture(dir.path(), "relu_silu", "aten.silu.default", &wrong.join("selftest/silu.json"));
    let (ok, output) = test(dir.path(), &right);
    assert!(ok && output.contains("1 node(s) translated into 1 ONNX node(s); max abs error"), "{output}");
    let (ok, output) = test(dir.path(), &wrong);
    assert!(!ok && output.contains("selftest/silu.json: output 0 differs by"), "{output}");

    // A case that does not hold the plugin's pattern proves nothing, and fails.
    std::fs::copy(wrong.join("selftest/silu.json"), right_fix.join("selftest/relu.json")).unwrap();
    let (ok, output) = test(dir.path(), &right_fix);
    assert!(!ok && output.contains("the plugin left the piece unchanged: the case does not exercise it"), "{output}");
    assert_no_scratch_left(dir.path());
}

/// A case is as untrusted as its plugin: a node whose target is not an op the
/// patch policy allows is refused by the worker's interpreter, and never runs.
#[test]
fn a_case_cannot_make_the_worker_call_what_the_policy_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let fix = copy_plugin("tests/plugins/kind-node-fix", dir.path());
    let case_path = fix.join("selftest/relu.json");
    capture(dir.path(), "relu_silu", "aten.relu.default", &case_path);
    let captured = std::fs::read_to_string(&case_path).unwrap();
    let marker = dir.path().join("reached");
    for (target, argument) in [("os.system", format!("touch {}", marker.display())), ("builtins.exec", "open('x', 'w')".to_string())] {
        let mut case: serde_json::Value = serde_json::from_str(&captured).unwrap();
        let graph = &mut case["input"];
        let hostile = serde_json::json!({"target": target, "inputs": [{"name": "command", "value": {"str": argument}}], "outputs": ["none"], "subgraph": 0});
        let id = graph["nodes"].as_array().unwrap().len();
        graph["nodes"].as_array_mut().unwrap().push(hostile);
        graph["subgraphs"][0]["order"].as_array_mut().unwrap().insert(0, serde_json::json!(id));
        std::fs::write(&case_path, serde_json::to_string(&case).unwrap()).unwrap();
        let (ok, output) = test(dir.path(), &fix);
        assert!(!ok && output.contains("PermissionError"), "{target}: {output}");
        assert!(!marker.exists(), "{target} ran");
    }
}

#[test]
fn capture_names_a_missing_op_in_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("case.json");
    let out = hfx_with_python(
        dir.path(),
        &["plugins", "capture", "--backend", "onnx", "--model-fn", "python:hfx_test_models:doubler", "--node", "aten.relu.default", "--case", case.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("aten.relu.default is not in the traced program"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!case.exists());
    assert_no_scratch_left(dir.path());
}

/// Every fix and translation the project ships has a case cut from a real
/// trace, and passes it numerically; patches are tested on real traces by `patches`.
#[test]
fn every_shipped_plugin_passes_its_self_tests() {
    let (ok, output) = test(&root(), &root().join("plugins"));
    assert!(ok && !output.contains("ships no self-test"), "{output}");
    let checked: std::collections::BTreeSet<&str> = output
        .lines()
        .filter(|l| l.starts_with("ok") && l.contains("max abs error"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    let fixes_and_translations: std::collections::BTreeSet<String> = std::fs::read_dir(root().join("plugins/onnx"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("fix-") || n.starts_with("translate-"))
        .map(|n| format!("onnx-{n}"))
        .collect();
    let missing: Vec<&String> = fixes_and_translations.iter().filter(|n| !checked.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "checked on values in no case: {missing:?}\n{output}");
}
