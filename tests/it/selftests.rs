//! Plugin self-tests: `hfx plugins capture` cuts a case out of a real trace,
//! `hfx plugins test` runs it through the plugin's stage and checks the result
//! numerically in the worker. The negative controls: a wrong fix and a wrong
//! translation, each well-formed, fail on the values; a case that does not
//! exercise its plugin fails; every plugin the project ships passes its own.
//! A patch's case is a model traced with and without the patch: it fails for
//! a patch that is not called, for one whose effect is there without it, and
//! when the ops it expects are missing; its program reaches only what the
//! patch sandbox's policy allows.

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
    let out = hfx_with_python(
        dir,
        &[
            "plugins",
            "capture",
            "--backend",
            "onnx",
            "--model-fn",
            &spec,
            "--static",
            "--node",
            target,
            "--case",
            case.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("1 node(s) around {target}, 1 input value(s)")), "{stdout}");
}

fn test(dir: &Path, folder: &Path) -> (bool, String) {
    let out = hfx_with_python(dir, &["plugins", "test", folder.to_str().unwrap()]);
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn captured_cases_check_fixes_and_translations_on_real_values() {
    let dir = tempfile::tempdir().unwrap();
    let (right_fix, wrong_fix) = (
        copy_plugin("tests/plugins/kind-node-fix", dir.path()),
        copy_plugin("tests/plugins/fix-wrong", dir.path()),
    );
    let relu = right_fix.join("selftest/relu.json");
    capture(dir.path(), "relu_silu", "aten.relu.default", &relu);
    let case: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&relu).unwrap()).unwrap();
    assert_eq!(
        case["values"]["x"]["tensor"]["shape"],
        serde_json::json!([3, 5]),
        "the trace's own input reached the piece"
    );
    std::fs::create_dir_all(wrong_fix.join("selftest")).unwrap();
    std::fs::copy(&relu, wrong_fix.join("selftest/relu.json")).unwrap();

    let (ok, output) = test(dir.path(), &right_fix);
    assert!(ok && output.contains("graph edit(s); max abs error 0.0e0 on 1 output(s)"), "{output}");
    // The negative control: a fix that leaves a well-formed graph computing something else.
    let (ok, output) = test(dir.path(), &wrong_fix);
    assert!(!ok && output.contains("selftest/relu.json: output 0 differs by"), "{output}");

    // Translations: the same, in ONNX Runtime against PyTorch.
    let (right, wrong) = (
        copy_plugin("tests/plugins/kind-translation", dir.path()),
        copy_plugin("tests/plugins/translation-wrong", dir.path()),
    );
    capture(dir.path(), "relu_silu", "aten.relu.default", &right.join("selftest/relu.json"));
    capture(dir.path(), "relu_silu", "aten.silu.default", &wrong.join("selftest/silu.json"));
    let (ok, output) = test(dir.path(), &right);
    assert!(
        ok && output.contains("1 node(s) translated into 1 ONNX node(s); max abs error"),
        "{output}"
    );
    let (ok, output) = test(dir.path(), &wrong);
    assert!(!ok && output.contains("selftest/silu.json: output 0 differs by"), "{output}");

    // A case that does not hold the plugin's pattern proves nothing, and fails.
    std::fs::copy(wrong.join("selftest/silu.json"), right_fix.join("selftest/relu.json")).unwrap();
    let (ok, output) = test(dir.path(), &right_fix);
    assert!(
        !ok && output
            .contains("the plugin left the piece unchanged: the case does not exercise it"),
        "{output}"
    );
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
    for (target, argument) in [
        ("os.system", format!("touch {}", marker.display())),
        ("builtins.exec", "open('x', 'w')".to_string()),
    ] {
        let mut case: serde_json::Value = serde_json::from_str(&captured).unwrap();
        let graph = &mut case["input"];
        let hostile = serde_json::json!({"target": target, "inputs": [{"name": "command", "value": {"str": argument}}], "outputs": ["none"], "subgraph": 0});
        let id = graph["nodes"].as_array().unwrap().len();
        graph["nodes"].as_array_mut().unwrap().push(hostile);
        graph["subgraphs"][0]["order"].as_array_mut().unwrap().insert(0, serde_json::json!(id));
        std::fs::write(&case_path, serde_json::to_string(&case).unwrap()).unwrap();
        let (ok, output) = test(dir.path(), &fix);
        assert!(!ok && output.contains("refused by the plugin sandbox"), "{target}: {output}");
        assert!(!output.contains("Traceback"), "{target}: one line: {output}");
        assert!(!marker.exists(), "{target} ran");
    }
}

#[test]
fn capture_names_a_missing_op_in_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("case.json");
    let out = hfx_with_python(
        dir.path(),
        &[
            "plugins",
            "capture",
            "--backend",
            "onnx",
            "--model-fn",
            "python:hfx_test_models:doubler",
            "--node",
            "aten.relu.default",
            "--case",
            case.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("aten.relu.default is not in the traced program"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!case.exists());
    assert_no_scratch_left(dir.path());
}

/// `capture --program` of a patch pattern into `case`.
fn capture_program(dir: &Path, pattern: &str, case: &Path) {
    let spec = format!("python:patch_patterns:{pattern}");
    let out = hfx_with_python(
        dir,
        &[
            "plugins",
            "capture",
            "--program",
            "--model-fn",
            &spec,
            "--dynamic",
            "--case",
            case.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("a program of"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rewrite_case(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut case: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut case);
    std::fs::write(path, serde_json::to_string(&case).unwrap()).unwrap();
}

#[test]
fn patch_cases_trace_a_program_with_and_without_the_patch() {
    let dir = tempfile::tempdir().unwrap();
    let roll = copy_plugin("plugins/onnx/patch-roll", dir.path());
    let case = roll.join("selftest/roll.json");
    capture_program(dir.path(), "roll", &case);
    let (ok, output) = test(dir.path(), &roll);
    assert!(
        ok && output.contains("answered 2 call(s);")
            && output.contains("max abs error 0.0e0 against eager"),
        "{output}"
    );

    // Expected ops: there with the patch, missing without it.
    rewrite_case(&case, |c| {
        c["expect"] = serde_json::json!({"ops": {"absent": ["aten.roll"], "present": ["aten.cat"]}})
    });
    let (ok, output) = test(dir.path(), &roll);
    assert!(ok && output.contains("without it aten.roll is in the trace"), "{output}");
    rewrite_case(&case, |c| c["expect"] = serde_json::json!({"ops": {"present": ["aten.roll"]}}));
    let (ok, output) = test(dir.path(), &roll);
    assert!(!ok && output.contains("with the patch: aten.roll is not in the trace"), "{output}");
    rewrite_case(&case, |c| c["expect"] = serde_json::json!({"ops": {"present": ["aten.add"]}}));
    let (ok, output) = test(dir.path(), &roll);
    assert!(!ok && output.contains("the ops expected are there without the patch too"), "{output}");

    // The same case for a patch the program never calls.
    let chunk = copy_plugin("plugins/onnx/patch-chunk-symbolic", dir.path());
    std::fs::create_dir_all(chunk.join("selftest")).unwrap();
    std::fs::copy(&case, chunk.join("selftest/roll.json")).unwrap();
    let (ok, output) = test(dir.path(), &chunk);
    assert!(
        !ok && output.contains("the patch answered no call: the case does not exercise it"),
        "{output}"
    );

    // A patch whose program is the same either way does not show a change.
    let math = copy_plugin("plugins/dynamo/patch-sdpa-math-cpu", dir.path());
    std::fs::create_dir_all(math.join("selftest")).unwrap();
    let shipped =
        plugin_dir("plugins/dynamo/patch-sdpa-math-cpu").join("selftest/data-dependent-batch.json");
    let copied = math.join("selftest/batch.json");
    std::fs::copy(shipped, &copied).unwrap();
    rewrite_case(&copied, |c| c["expect"] = serde_json::json!("changes"));
    let (ok, output) = test(dir.path(), &math);
    assert!(!ok && output.contains("the traced program is the same without the patch"), "{output}");
    assert_no_scratch_left(dir.path());
}

/// A patch case's program is as untrusted as its plugin: every call, method,
/// attribute, layer class and reference is decided by the patch sandbox's
/// policy on what it resolves to, and a refused one never runs.
#[test]
fn a_patch_case_program_reaches_only_what_the_policy_allows() {
    let dir = tempfile::tempdir().unwrap();
    let roll = copy_plugin("plugins/onnx/patch-roll", dir.path());
    let case = roll.join("selftest/roll.json");
    capture_program(dir.path(), "roll", &case);
    let captured = std::fs::read_to_string(&case).unwrap();
    let marker = dir.path().join("reached");
    let touch = format!("touch {}", marker.display());
    let x = serde_json::json!({"node": "x"});
    let hostile: Vec<(&str, serde_json::Value, serde_json::Value)> = vec![
        (
            "os.system",
            serde_json::json!({"name": "h", "op": "call_function", "target": "os.system", "args": [touch]}),
            serde_json::Value::Null,
        ),
        (
            "a re-export",
            serde_json::json!({"name": "h", "op": "call_function", "target": "transformers.models.llama.modeling_llama.torch.os.system", "args": [touch]}),
            serde_json::Value::Null,
        ),
        (
            "builtins.exec",
            serde_json::json!({"name": "h", "op": "call_function", "target": "builtins.exec", "args": ["import os; os.system('touch reached')"]}),
            serde_json::Value::Null,
        ),
        (
            "a private method",
            serde_json::json!({"name": "h", "op": "call_method", "target": "__reduce_ex__", "args": [x, 2]}),
            serde_json::Value::Null,
        ),
        (
            "a storage method",
            serde_json::json!({"name": "h", "op": "call_method", "target": "untyped_storage", "args": [x]}),
            serde_json::Value::Null,
        ),
        (
            "a dunder attribute",
            serde_json::json!({"name": "h", "op": "getattr", "args": [x, "__class__"]}),
            serde_json::Value::Null,
        ),
        (
            "a ref to eval",
            serde_json::json!({"name": "h", "op": "call_function", "target": "transformers.masking_utils.sdpa_mask", "args": [2, 8, 8], "kwargs": {"mask_function": {"ref": "builtins.eval"}}}),
            serde_json::Value::Null,
        ),
        (
            "a layer that is not one",
            serde_json::json!({"name": "h", "op": "call_module", "target": "shell", "args": [touch]}),
            serde_json::json!({"shell": {"class": "subprocess.Popen"}}),
        ),
        (
            "a config that is not one",
            serde_json::json!({"name": "h", "op": "call_module", "target": "norm", "args": [x]}),
            serde_json::json!({"norm": {"class": "transformers.models.llama.modeling_llama.LlamaRMSNorm", "config": "transformers.models.llama.modeling_llama.torch.os.system", "values": {}}}),
        ),
    ];
    // One case file each, run in one worker.
    std::fs::remove_file(&case).unwrap();
    for (index, (_, node, modules)) in hostile.iter().enumerate() {
        let mut value: serde_json::Value = serde_json::from_str(&captured).unwrap();
        let program = &mut value["model"]["program"];
        program["nodes"].as_array_mut().unwrap().insert(1, node.clone());
        if !modules.is_null() {
            program["modules"] = modules.clone();
        }
        std::fs::write(
            roll.join(format!("selftest/hostile-{index}.json")),
            serde_json::to_string(&value).unwrap(),
        )
        .unwrap();
    }
    let (ok, output) = test(dir.path(), &roll);
    assert!(!ok && output.contains(&format!("0 passed, {} failed", hostile.len())), "{output}");
    for (index, (what, _, _)) in hostile.iter().enumerate() {
        // This case's report runs to the next case's.
        let report =
            output.split(&format!("selftest/hostile-{index}.json: ")).nth(1).unwrap_or_default();
        let report = report.split("FAILED ").next().unwrap_or_default();
        assert!(report.contains("refused by the plugin sandbox"), "{what}: {report}");
        assert!(!report.contains("Traceback"), "{what}: one line: {report}");
    }
    assert!(!marker.exists(), "a refused call ran");
    assert_no_scratch_left(dir.path());
}

/// Every plugin the project ships has a case (cut from a real trace, or for a
/// patch a model to trace) and passes it numerically, the opt-in sets' too.
#[test]
fn every_shipped_plugin_passes_its_self_tests() {
    let plugins = root().join("plugins");
    // The WebGPU and CUDA sets' own plugins checked on values (the rest of
    // those sets is the CPU set's; CUDA's MoE case is structural: ONNX
    // Runtime's CPU kernel cannot run it).
    let ort = plugins.join("onnx-ort-cpu");
    let own = [
        "onnx-ort-webgpu/fuse-group-query-attention",
        "onnx-ort-cuda/fuse-group-query-attention",
        "onnx-ort-cuda/fuse-multi-head-attention",
    ];
    let folders: Vec<String> = [plugins.clone(), ort]
        .into_iter()
        .chain(own.iter().map(|o| plugins.join(o)))
        .map(|f| f.to_str().unwrap().to_string())
        .collect();
    let mut args = vec!["plugins", "test"];
    args.extend(folders.iter().map(String::as_str));
    let out = hfx_with_python(&root(), &args);
    let (ok, output) = (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    );
    assert!(ok && !output.contains("ships no self-test"), "{output}");
    let checked: std::collections::BTreeSet<&str> = output
        .lines()
        .filter(|l| l.starts_with("ok") && l.contains("max abs error"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    let mut shipped: std::collections::BTreeSet<String> =
        ["dynamo", "onnx", "onnx-ort-cpu", "onnx-ort-webgpu"]
            .iter()
            .flat_map(|backend| {
                std::fs::read_dir(root().join("plugins").join(backend))
                    .unwrap()
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| {
                        ["fix-", "translate-", "patch-", "fuse-"].iter().any(|p| n.starts_with(p))
                    })
                    .map(move |n| format!("{backend}-{n}"))
            })
            .collect();
    shipped.extend(own[1..].iter().map(|o| o.replace('/', "-")));
    assert!(shipped.len() >= 37, "{shipped:?}");
    let missing: Vec<&String> = shipped.iter().filter(|n| !checked.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "checked on values in no case: {missing:?}\n{output}");

    // A case computing in float16 is held to float16's tolerance, and needs
    // it: off by a float16 rounding step, beyond a fix's 1e-4, where the same
    // piece in float32 is not.
    let (gqa, mha) =
        ("onnx-ort-cpu-fuse-group-query-attention", "onnx-ort-cuda-fuse-multi-head-attention");
    for (plugin, case, float16) in [
        (gqa, "selftest/decode.json", false),
        (gqa, "selftest/prefill.json", false),
        (gqa, "selftest/decode-float16.json", true),
        (gqa, "selftest/prefill-float16.json", true),
        (mha, "selftest/prefill.json", false),
        (mha, "selftest/prefill-float16.json", true),
    ] {
        let line = output
            .lines()
            .find(|l| l.starts_with("ok") && l.contains(plugin) && l.contains(&format!(" {case} ")))
            .unwrap_or_else(|| panic!("{plugin} {case} did not pass\n{output}"));
        let held = if float16 { "float16's atol/rtol 1e-2" } else { "atol/rtol 1e-3" };
        assert!(line.ends_with(&format!("within {held}")), "{line}");
        let error: f64 = line
            .split("max abs error ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|e| e.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(error > 1e-4, float16, "{line}");
    }
}

/// A self-test folder is data only: a `.py` (or anything not a `.json` case)
/// beside the cases refuses the plugin's self-tests in one line naming the
/// file, before any case runs.
#[test]
fn a_self_test_folder_holding_anything_but_json_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = copy_plugin("plugins/dynamo/patch-kernels-unavailable", dir.path());
    std::fs::create_dir_all(plugin.join("selftest")).unwrap();
    std::fs::copy(
        plugin_dir("plugins/dynamo/patch-kernels-unavailable").join("selftest/llama.json"),
        plugin.join("selftest/llama.json"),
    )
    .unwrap();
    let marker = dir.path().join("reached");
    std::fs::write(
        plugin.join("selftest/json.py"),
        format!("import os\nos.system('touch {}')\n", marker.display()),
    )
    .unwrap();
    let folder = plugin.to_str().unwrap();
    for (command, args) in [
        ("verify", vec!["plugins", "verify", "--no-default-plugins", "--plugins", folder]),
        ("test", vec!["plugins", "test", folder]),
    ] {
        let out = hfx_with_python(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains("selftest/json.py")
                && stderr.contains("only `.json` cases"),
            "{command}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{command}: {stderr}");
    }
    assert!(!marker.exists());
}

/// A patch case's `architecture` is as untrusted as its plugin: its task names
/// a transformers model class (never a dotted path the worker would import,
/// nor a function such as `pipeline`), and its overrides set no `auto_map`
/// or attention implementation (code or kernels to fetch).
#[test]
fn a_patch_case_task_and_overrides_name_no_code() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = copy_plugin("plugins/dynamo/patch-kernels-unavailable", dir.path());
    std::fs::create_dir_all(plugin.join("selftest")).unwrap();
    let original =
        plugin_dir("plugins/dynamo/patch-kernels-unavailable").join("selftest/llama.json");
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let hostile: Vec<(&str, Edit, &str)> = vec![
        (
            "a dotted task",
            Box::new(|c| c["model"]["task"] = "transformers.utils.hub.cached_file".into()),
            "is not a class name",
        ),
        (
            "a function as task",
            Box::new(|c| c["model"]["task"] = "pipeline".into()),
            "not a transformers model class",
        ),
        (
            "a tokenizer as task",
            Box::new(|c| c["model"]["task"] = "AutoTokenizer".into()),
            "not a transformers model class",
        ),
        (
            "an auto_map override",
            Box::new(|c| {
                c["model"]["overrides"]["auto_map"] = "{\"AutoModel\": \"evil/repo--x.Y\"}".into()
            }),
            "may name code",
        ),
        (
            "an attention kernel",
            Box::new(|c| {
                c["model"]["overrides"]["attn_implementation"] = "kernels-community/evil".into()
            }),
            "may name code",
        ),
    ];
    for (index, (_, edit, _)) in hostile.iter().enumerate() {
        let case = plugin.join(format!("selftest/hostile-{index}.json"));
        std::fs::copy(&original, &case).unwrap();
        rewrite_case(&case, |c| edit(c));
    }
    let (ok, output) = test(dir.path(), &plugin);
    assert!(!ok && output.contains(&format!("0 passed, {} failed", hostile.len())), "{output}");
    for (index, (what, _, expected)) in hostile.iter().enumerate() {
        let report =
            output.split(&format!("selftest/hostile-{index}.json: ")).nth(1).unwrap_or_default();
        let report = report.split("FAILED ").next().unwrap_or_default();
        assert!(report.contains(expected), "{what}: {report}");
    }
    assert_no_scratch_left(dir.path());
}
