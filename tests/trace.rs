//! The host-driven trace: `hfx run --model ...` starts the worker, traces a
//! real transformers model, and exports; worker failures are clear errors
//! that leave no output behind.

mod common;

use common::*;
use common::hfx_with_python as hfx;

const TINY: &[(&str, &str)] = &[
    ("llama", "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,max_position_embeddings=64"),
    ("gpt2", "vocab_size=128,n_embd=32,n_layer=2,n_head=4,n_positions=64"),
    ("bert", "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,max_position_embeddings=64"),
    ("vit", "image_size=32,patch_size=8,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4"),
    ("qwen3", "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=2,num_attention_heads=4,num_key_value_heads=2,head_dim=8"),
    ("t5", "vocab_size=128,d_model=32,d_kv=8,d_ff=64,num_layers=2,num_decoder_layers=2,num_heads=4"),
];

#[test]
fn traced_models_match_eager_static_and_dynamic() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, set) in TINY {
        for mode in ["static", "dynamic"] {
            let out = dir.path().join(format!("{arch}_{mode}.pt2"));
            let mut args = vec!["run", "--backend", "dynamo", "--model", arch, "--set", set, "-o", out.to_str().unwrap()];
            if mode == "dynamic" {
                args.push("--dynamic");
            }
            let result = hfx(dir.path(), &args);
            let stdout = String::from_utf8_lossy(&result.stdout);
            assert!(result.status.success(), "{arch} {mode}: {}", String::from_utf8_lossy(&result.stderr));
            assert!(stdout.contains("traced ") && stdout.contains("eager reference"), "{stdout}");
            let reference = out.with_extension("reference.pt");
            run_python("check_trace.py", &[out.to_str().unwrap(), reference.to_str().unwrap(), arch, &overrides_json(set), mode]);
        }
    }
    assert_no_scratch_left(dir.path());
}

/// Runs a failing model function and returns stderr; asserts nothing was written.
fn failing(function: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pt2");
    std::fs::write(&out, "previous good output").unwrap();
    let spec = format!("python:hfx_test_models:{function}");
    let mut args = vec!["run", "--backend", "dynamo", "--model-fn", &spec, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let result = hfx(dir.path(), &args);
    assert!(!result.status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous good output", "the old artifact must stay");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing else may be left behind");
    String::from_utf8_lossy(&result.stderr).into_owned()
}

#[test]
fn a_python_exception_is_reported_with_its_traceback() {
    let stderr = failing("raises", &[]);
    assert!(stderr.contains("ValueError in the trace worker during `trace`: this model cannot be built (on purpose)"), "{stderr}");
    assert!(stderr.contains("Traceback (most recent call last)") && stderr.contains("hfx_test_models.py"), "{stderr}");
}

#[test]
fn a_hanging_worker_is_stopped_at_the_deadline() {
    let started = std::time::Instant::now();
    let stderr = failing("hangs", &["--trace-deadline-s", "3"]);
    assert!(stderr.contains("did not answer `trace` within 3 s (stopped)") && stderr.contains("about to hang"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the deadline must stop the hang");
}

#[test]
fn a_crashing_worker_is_reported_with_its_output() {
    let stderr = failing("crashes", &[]);
    assert!(stderr.contains("the trace worker exited (exit status: 3) during `trace`") && stderr.contains("about to crash"), "{stderr}");
}

#[test]
fn a_model_function_exports_with_its_own_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("doubler.pt2");
    let result = hfx(dir.path(), &["run", "--backend", "dynamo", "--model-fn", "python:hfx_test_models:doubler", "-o", out.to_str().unwrap()]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert!(String::from_utf8_lossy(&result.stdout).contains("traced Doubler"));
}

#[test]
fn a_config_file_names_the_model_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("export.toml"),
        "backend = \"dynamo\"\nmodel = \"bert\"\ndynamic = true\noutput = \"bert.pt2\"\n\
         [set]\nvocab_size = 128\nhidden_size = 32\nintermediate_size = 64\nnum_hidden_layers = 1\nnum_attention_heads = 4\n",
    )
    .unwrap();
    let result = hfx(dir.path(), &["run", "--config", "export.toml", "-o", "from-flag.pt2"]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert!(String::from_utf8_lossy(&result.stdout).contains("traced BertModel"));
    assert!(dir.path().join("from-flag.pt2").exists() && !dir.path().join("bert.pt2").exists());
    let set = "vocab_size=128,hidden_size=32,intermediate_size=64,num_hidden_layers=1,num_attention_heads=4";
    let out = dir.path().join("from-flag.pt2");
    run_python("check_trace.py", &[out.to_str().unwrap(), out.with_extension("reference.pt").to_str().unwrap(), "bert", &overrides_json(set), "dynamic"]);
}

#[test]
fn the_worker_reports_the_versions_plugins_are_resolved_and_locked_against() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = plugin_dir("tests/plugins/versioned-v1");
    let v2 = plugin_dir("tests/plugins/versioned-v2");
    let lock = dir.path().join("hfx.lock");
    let plugins = ["--plugins", v1.to_str().unwrap(), "--plugins", v2.to_str().unwrap(), "--lock", lock.to_str().unwrap()];
    let result = hfx(dir.path(), &[&["plugins", "lock", "-o", lock.to_str().unwrap()][..], &plugins[..4]].concat());
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    // torch 2.13 is installed: version 2 of the plugin applies, and the worker's report matches the lock.
    let run = ["run", "--backend", "onnx", "--model-fn", "python:hfx_test_models:doubler", "-o", "out.pt2", "--locked", "-v"];
    let result = hfx(dir.path(), &[&run[..], &plugins[..]].concat());
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("test-versioned-fix 1.0.0: torch 2.13.0"), "version 1 is skipped for the installed torch: {stdout}");
    // A different deployment torch is a lock difference naming both versions.
    let result = hfx(dir.path(), &[&run[..], &plugins[..], &["--target", "torch=2.14.0"][..]].concat());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success() && stderr.contains("torch: locked 2.13.0") && stderr.contains("found 2.14.0"), "{stderr}");
}

#[test]
fn a_patch_plugin_answers_calls_while_tracing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("where.pt2");
    let patch = plugin_dir("tests/plugins/kind-patch");
    let result = hfx(dir.path(), &["run", "--backend", "onnx", "--plugins", patch.to_str().unwrap(), "--model-fn", "python:hfx_test_models:uses_where", "-o", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("patch test-kind-patch") && stdout.contains("answered 1 call(s)"), "{stdout}");
    // The recorded op is the one the plugin's program called, not torch.where's own lowering.
    let pt2 = hfx::graph::pt2::Pt2::open(&out).unwrap();
    let node = pt2.programs["model"].graph_module.graph.nodes.iter().find(|n| n.target == "torch.ops.aten.where.self").unwrap();
    assert!(node.metadata["torch_fn"].contains("OpOverload.where.self"), "{:?}", node.metadata);
}

#[test]
fn originals_are_restored_after_a_trace_also_when_it_fails() {
    use hfx::plugins::{Runtime, RuntimeOptions, Session};
    use hfx::trace::{ModelSource, TraceRequest, Worker};
    let runtime = Runtime::new(RuntimeOptions { cache_dir: None, ..Default::default() }).unwrap();
    let plugin = load(&runtime, "tests/plugins/kind-patch");
    let dir = tempfile::tempdir().unwrap();
    let pythonpath = root().join("tests/python");
    let env = [("PYTHONPATH", pythonpath.as_os_str())];
    let mut worker = Worker::start_with_env(python().to_str().unwrap(), std::time::Duration::from_secs(120), &env).unwrap();
    let deadline = std::time::Duration::from_secs(300);
    let patches = serde_json::json!({"patches": [{"plugin": plugin.name(), "targets": plugin.targets}]});
    for (function, should_work) in [("uses_where", true), ("where_then_fails", false)] {
        let request = TraceRequest::new(ModelSource::Function(format!("python:hfx_test_models:{function}")));
        let mut sessions = vec![Session::new(&runtime, &plugin, "patches")];
        let result = hfx::trace::trace(&mut worker, &request, &mut sessions, &dir.path().join("m.pt2"), &dir.path().join("r.pt"), deadline);
        assert_eq!(result.is_ok(), should_work, "{function}: {:?}", result.err().map(|e| e.to_string()));
        assert_eq!(sessions[0].calls, 1, "{function}: the patch answered the call");
        let restored = worker.call("patches_restored", patches.clone(), deadline).unwrap();
        assert_eq!(restored, serde_json::json!({"torch.where": true}), "{function}: torch.where is the original again");
    }
}

/// Backend preparation and the optional decomposition: a tiny Llama traced in
/// bfloat16 and decomposed to core ATen has bfloat16 weights, no `linear`
/// left, and matches eager bfloat16 (atol/rtol 1e-2, bfloat16's precision).
#[test]
fn a_model_is_traced_in_the_dtype_asked_for_and_decomposed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llama_bf16.pt2");
    let (_, set) = TINY[0];
    let result = hfx(dir.path(), &["run", "--backend", "dynamo", "--model", "llama", "--set", set, "--dtype", "bfloat16", "--decompose", "-o", out.to_str().unwrap()]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let reference = out.with_extension("reference.pt");
    run_python(
        "check_patch.py",
        &[out.to_str().unwrap(), reference.to_str().unwrap(), "-", "--absent=aten.linear", "--present=aten.mm", "--weights-dtype=bfloat16", "--atol=1e-2"],
    );
    let result = hfx(dir.path(), &["run", "--backend", "dynamo", "--model", "llama", "--set", set, "--dtype", "int64", "-o", out.to_str().unwrap()]);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("not a floating torch dtype"));
}
