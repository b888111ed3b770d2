//! The `hfx` binary as a user runs it.

use std::process::Command;

use crate::common::*;

const EXAMPLE: &str = "examples/graphs/dynamic-batch-sort.json";

fn hfx(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(args)
        .current_dir(root())
        .env("HFX_CACHE_DIR", cache_dir())
        .output()
        .unwrap()
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
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        expected,
        "run with HFX_BLESS=1 to update {EXAMPLE}"
    );
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
    let out = hfx(&[
        "run",
        "--backend",
        "onnx",
        "--plugins",
        "plugins/onnx",
        EXAMPLE,
        "-o",
        output.to_str().unwrap(),
    ]);
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
        "run",
        "--backend",
        "onnx",
        "--plugins",
        "tests/plugins/hostile-panic",
        graph.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
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
    assert!(
        stderr.contains(&dir.join("plugin.toml").display().to_string())
            && stderr.contains("missing field"),
        "{stderr}"
    );
}

/// `hfx ARGS` in `dir` (no Python involved).
fn hfx_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(args)
        .current_dir(dir)
        .env("HFX_CACHE_DIR", cache_dir())
        .output()
        .unwrap()
}

fn one_error_line(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn a_plugin_memory_cap_past_32_bits_is_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let example = root().join(EXAMPLE);
    let output = dir.path().join("out.json");
    // 2^44 MiB: `m << 20` wraps to a 0-byte cap.
    for mib in ["17592186044416", "4097", "0"] {
        let out = hfx_in(
            dir.path(),
            &[
                "run",
                "--backend",
                "onnx",
                example.to_str().unwrap(),
                "-o",
                output.to_str().unwrap(),
                "--plugin-memory-mib",
                mib,
            ],
        );
        let stderr = one_error_line(&out);
        assert!(stderr.contains(&format!("--plugin-memory-mib {mib}: give 1 to 4096")), "{stderr}");
    }
    assert!(!output.exists());
    let out = hfx_in(
        dir.path(),
        &[
            "run",
            "--backend",
            "onnx",
            example.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--plugin-memory-mib",
            "4096",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn trace_options_with_an_input_file_are_an_error_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let example = root().join(EXAMPLE);
    let output = dir.path().join("out.json");
    let base =
        ["run", "--backend", "onnx", example.to_str().unwrap(), "-o", output.to_str().unwrap()];
    for (extra, named) in [
        (&["--set", "hidden_size=64"][..], "--set"),
        (&["--dynamic"][..], "--dynamic"),
        (&["--dtype", "float16", "--decompose"][..], "--decompose, --dtype"),
        (&["--model", "llama"][..], "either an input file or a model"),
    ] {
        let out = hfx_in(dir.path(), &[&base[..], extra].concat());
        let stderr = one_error_line(&out);
        assert!(stderr.contains(named), "{extra:?}: {stderr}");
        if !extra.contains(&"--model") {
            assert!(
                stderr.contains("apply to a model hfx traces")
                    && stderr.contains("dynamic-batch-sort.json"),
                "{stderr}"
            );
        }
    }
    // The same from a config file.
    std::fs::write(dir.path().join("run.toml"), "backend = \"onnx\"\ndynamic = true\n").unwrap();
    let out = hfx_in(
        dir.path(),
        &["run", "--config", "run.toml", example.to_str().unwrap(), "-o", output.to_str().unwrap()],
    );
    assert!(one_error_line(&out).contains("--dynamic apply to a model hfx traces"));
    assert!(!output.exists());
    // --verify needs a runtime to run the artifact in.
    let out = hfx_in(dir.path(), &[&base[..], &["--verify"][..]].concat());
    assert!(one_error_line(&out).contains("a .json graph has none: write .onnx or .pt2"));
    assert!(!output.exists());
}

#[test]
fn an_os_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = hfx_in(
        dir.path(),
        &[
            "run",
            "--backend",
            "dynamo",
            "--model",
            "llama",
            "-o",
            "out.pt2",
            "--python",
            "/nonexistent/python",
        ],
    );
    let stderr = one_error_line(&out);
    assert!(
        stderr.contains("cannot start the trace worker with `/nonexistent/python`"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
    let out = hfx_in(
        dir.path(),
        &["run", "--backend", "onnx", "/nonexistent/graph.json", "-o", "out.json"],
    );
    let stderr = one_error_line(&out);
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
}

#[test]
fn worker_memory_limits_out_of_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for gib in ["0", "-1", "NaN", "1e300"] {
        let out = hfx_in(
            dir.path(),
            &[
                "run",
                "--backend",
                "dynamo",
                "--model",
                "llama",
                "-o",
                "out.pt2",
                &format!("--worker-memory-gib={gib}"),
            ],
        );
        let stderr = one_error_line(&out);
        assert!(
            stderr.contains("--worker-memory-gib") && stderr.contains("give 0.25 to"),
            "{gib}: {stderr}"
        );
    }
    // From the config file too (`worker-memory-gib`).
    std::fs::write(
        dir.path().join("run.toml"),
        "backend = \"dynamo\"\nmodel = \"llama\"\noutput = \"out.pt2\"\nworker-memory-gib = 0.1\n",
    )
    .unwrap();
    let stderr = one_error_line(&hfx_in(dir.path(), &["run", "--config", "run.toml"]));
    assert!(stderr.contains("--worker-memory-gib 0.1: give 0.25 to"), "{stderr}");
}

#[test]
fn stale_scratch_folders_of_dead_hfx_runs_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    // No process has this pid (pid_max is at most 2^22); the test's own pid is alive.
    let dead = dir.path().join(".hfx-trace-2147483646");
    let alive = dir.path().join(format!(".hfx-trace-{}", std::process::id()));
    for scratch in [&dead, &alive] {
        std::fs::create_dir(scratch).unwrap();
        std::fs::write(scratch.join("model.pt2"), "left by a killed run").unwrap();
    }
    let example = root().join(EXAMPLE);
    let out = hfx_in(
        dir.path(),
        &["run", "--backend", "onnx", example.to_str().unwrap(), "-o", "out.json"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dead.exists(), "the dead run's scratch folder must go");
    assert!(alive.exists(), "a running hfx's scratch folder must stay");
}

/// From a folder other than the checkout, hfx finds the checkout's Python;
/// a Python without torch is named in one line with the command that fixes it.
#[test]
fn the_workers_python_is_found_from_any_folder_and_a_python_without_torch_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.onnx");
    let plugins = root().join("plugins/onnx");
    let set = "hidden_size=32,intermediate_size=64,num_hidden_layers=1,num_attention_heads=4,num_key_value_heads=2,vocab_size=128";
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--backend",
            "onnx",
            "--model",
            "llama",
            "--set",
            set,
            "--plugins",
            plugins.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        Command::new(env!("CARGO_BIN_EXE_hfx"))
            .args(&args)
            .current_dir(dir.path())
            .env_remove("HFX_PYTHON")
            .env("HFX_CACHE_DIR", cache_dir())
            .output()
            .unwrap()
    };
    let found = run(&[]);
    assert!(found.status.success(), "{}", String::from_utf8_lossy(&found.stderr));
    assert!(out.exists());

    // A fresh virtual environment: a Python with no torch and no transformers.
    let venv = dir.path().join("bare");
    let made =
        Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success());
    let bare = venv.join("bin/python");
    let refused = run(&["--python", bare.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("has no torch, transformers")
            && stderr.contains("cargo xtask setup-python"),
        "{stderr}"
    );
}

/// Bad model options the host refuses before starting the worker (#38), each
/// in one line naming the input and the fix: a pipeline task's name for
/// `--task` (the class that builds its model named), a misspelt one (the
/// nearest), `--set` with a model folder (its config.json is the config), a
/// `--dtype` or `--device` torch does not have.
#[test]
fn bad_model_options_are_refused_in_one_line_before_the_worker() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["--model", "llama", "--task", "text-generation-with-past"],
            "--task text-generation-with-past: names the class to build, not a pipeline task: --task AutoModelForCausalLM with --generation",
        ),
        (
            &["--model", "llama", "--task", "text-generaton"],
            "(for the pipeline task text-generation: --task AutoModelForCausalLM)",
        ),
        (
            &["--model-dir", "no-such-folder", "--set", "num_hidden_layers=1"],
            "--set changes the config --model builds; --model-dir loads the folder's config.json: edit it there",
        ),
        (
            &["--model-fn", "python:m:f", "--set", "num_hidden_layers=1"],
            "--model-fn builds its own model: change the config in the function",
        ),
        (&["--model", "llama", "--dtype", "banana"], "--dtype banana: not a floating torch dtype; give one of float32, float16, bfloat16, float64"),
        (&["--model", "llama", "--device", "gpu"], "--device gpu: give cpu, cuda or cuda:N"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let out = format!("{}/export/", dir.path().display());
    for (model, says) in cases {
        let args = [&["run", "--backend", "dynamo", "-o", out.as_str()], model].concat();
        // No worker: a Python that cannot start would be the error otherwise.
        let result = hfx(&[&args[..], &["--python", "/nonexistent/python"]].concat());
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!result.status.success(), "{model:?}");
        assert_eq!(stderr.lines().count(), 1, "{model:?}: {stderr}");
        assert!(stderr.contains(says), "{model:?}: {stderr}");
    }
}

/// Every input axis is dynamic unless `--static`; the sample sizes and
/// ranges a user gives are checked before any work, each refusal one line
/// naming the input and the fix, from the flags and from a config file.
#[test]
fn shape_options_are_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    // Each refused before the output is looked at.
    let model = ["run", "--backend", "onnx", "--model", "llama"];
    let cases: &[(&[&str], &str)] = &[
        (&["--sample", "batch=1"], "--sample batch=1: torch.export fixes an axis traced at size 1, so a dynamic batch needs a sample of 2 or more; add --static"),
        (&["--sample", "batch=4,sequence=4"], "batch and sequence both 4"),
        (&["--sample", "bacth=2"], "--sample bacth=2: unknown axis `bacth` (batch, sequence)"),
        (&["--sample", "sequence=0", "--static"], "`0` is not a size from 1 to"),
        (&["--dynamic-shapes", "banana"], "--dynamic-shapes banana: expected INPUT:AXIS=MIN..MAX, e.g. input_ids:1=2..2048"),
        (&["--dynamic-shapes", "input_ids:1=2048..2"], "the range 2048..2 is empty or one size: give MIN < MAX"),
        (&["--dynamic-shapes", "input_ids:12=2..8"], "axis `12`: give an axis from 0 to 7"),
        (&["--static", "--dynamic"], "--static fixes every axis and --dynamic makes axes dynamic: give one"),
        (&["--static", "--dynamic-shapes", "input_ids:1=2..8"], "give one"),
        (&["--generation", "--static"], "--generation with the model's growing cache cannot be --static"),
        (&["--generation", "--dynamic-shapes", "input_ids:1=2..16"], "drop --dynamic-shapes"),
    ];
    for (extra, expected) in cases {
        let args: Vec<&str> = model.iter().chain(extra.iter()).copied().collect();
        let stderr = one_error_line(&hfx_in(dir.path(), &args));
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    let function = ["run", "--backend", "onnx", "--model-fn", "python:m:f", "-o", "out.onnx"];
    let stderr =
        one_error_line(&hfx_in(dir.path(), &[&function[..], &["--sample", "batch=3"]].concat()));
    assert!(
        stderr.contains(
            "--sample sizes the inputs hfx generates, and --model-fn's function returns its own"
        ),
        "{stderr}"
    );
    let example = root().join(EXAMPLE);
    let traced =
        ["run", "--backend", "onnx", example.to_str().unwrap(), "-o", "out.json", "--static"];
    let stderr = one_error_line(&hfx_in(dir.path(), &traced));
    assert!(stderr.contains("--static apply to a model hfx traces"), "{stderr}");
    // The config file's keys: `static`, `sample`, `dynamic-shapes`.
    for (keys, expected) in [
        (
            "static = true\ndynamic-shapes = [\"input_ids:1=2..8\"]\n",
            "--static fixes every axis and --dynamic-shapes",
        ),
        ("sample = { batch = 1 }\n", "--sample batch=1: torch.export fixes"),
        ("static = true\nsample = { batch = 0 }\n", "--sample batch=0: `0` is not a size"),
        ("dynamic-shapes = [\"banana\"]\n", "--dynamic-shapes banana: expected"),
    ] {
        std::fs::write(
            dir.path().join("run.toml"),
            format!("backend = \"onnx\"\nmodel = \"llama\"\noutput = \"out.onnx\"\n{keys}"),
        )
        .unwrap();
        let stderr = one_error_line(&hfx_in(dir.path(), &["run", "--config", "run.toml"]));
        assert!(stderr.contains(expected), "{keys}: {stderr}");
    }
    assert!(!dir.path().join("out.onnx").exists());
}

/// `--quantize` and its options are checked before any work, each refusal
/// one line naming the flag and the fix, from the flags and from a config file.
#[test]
fn quantize_options_are_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = ["run", "--model", "llama", "-o", "out/"];
    let cases: &[(&[&str], &str)] = &[
        (&["--backend", "dynamo", "--quantize", "int4"], "--quantize int4: quantization is written by the ONNX backend, not --backend dynamo: give --backend onnx"),
        (&["--backend", "onnx", "--quantize", "int4", "--no-optimize"], "which --no-optimize skips: drop one of them"),
        (&["--backend", "onnx", "--quantize", "int3"], "--quantize int3: hfx quantizes `int4`, `int8-dynamic` and `int8-static`"),
        (&["--backend", "onnx", "--quantize", "int4", "--quantize-block-size", "48"], "--quantize-block-size 48: give 32, 64 or 128"),
        (&["--backend", "onnx", "--quantize-exclude", "lm_head"], "tune --quantize: add --quantize int4"),
        (&["--backend", "onnx", "--quantize", "int8-dynamic", "--quantize-block-size", "64"], "--quantize-block-size, --quantize-asymmetric and --quantize-accuracy-level tune --quantize int4; int8-dynamic quantizes each output channel symmetrically: drop them"),
        (&["--backend", "onnx", "--quantize", "int4", "--quantize-accuracy-level", "5"], "--quantize-accuracy-level 5: give 0 (unset), 1 (float32), 2 (float16), 3 (bfloat16) or 4 (int8)"),
        (&["--backend", "onnx", "--quantize", "int4", "--calibration-samples", "4"], "--calibration-samples and --calibration calibrate --quantize int8-static: add it, or drop them"),
        (&["--backend", "onnx", "--quantize", "int8-static", "--calibration-samples", "0"], "--calibration-samples 0: give 1 to 1024"),
        (&["--backend", "onnx", "--quantize", "int8-static", "--calibration", "absent.npz"], "--calibration absent.npz: no such file: give a .npz of the model's inputs, each with a leading sample axis"),
        (&["--backend", "onnx", "--quantize", "int8-static", "--calibration", "run.toml", "--calibration-samples", "2"], "--calibration run.toml and --calibration-samples: the file's samples are the calibration inputs: give one of them"),
        (&["--backend", "onnx", "--quantize", "int8-static", "--quantize-asymmetric"], "int8-static quantizes each output channel symmetrically: drop them"),
        (&["--backend", "onnx", "--quantize", "int8-static", "--ort-fusions", "cpu"], "--quantize int8-static with --ort-fusions: the fusions match float MatMuls, which int8-static puts QDQ pairs around: drop one of them"),
    ];
    for (extra, expected) in cases {
        let args: Vec<&str> = model.iter().chain(extra.iter()).copied().collect();
        let stderr = one_error_line(&hfx_in(dir.path(), &args));
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    std::fs::write(
        dir.path().join("run.toml"),
        "backend = \"executorch\"\nmodel = \"llama\"\noutput = \"out/\"\nquantize = \"int4\"\n",
    )
    .unwrap();
    let stderr = one_error_line(&hfx_in(dir.path(), &["run", "--config", "run.toml"]));
    assert!(stderr.contains("ExecuTorch's schemes are 8da4w, 4w and 8w"), "{stderr}");
    assert!(!dir.path().join("out").exists());
}
