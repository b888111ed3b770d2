//! `import hfx` (`python/hfx/`): `hfx.export` traces the caller's live model
//! in the caller's process, which serves the worker protocol to the `hfx`
//! binary it starts; and the wheel that carries both (`cargo xtask wheel`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::*;

/// `tests/python/check_api.py ARGS` under the checkout's Python, `hfx` and
/// `hfx_worker` imported from the checkout and the tests' binary as `hfx`.
fn check_api(args: &[&str]) -> Output {
    let pythonpath =
        std::env::join_paths([root().join("python"), root().join("host/worker")]).unwrap();
    Command::new(python())
        .arg(root().join("tests/python/check_api.py"))
        .args(args)
        .env("PYTHONPATH", pythonpath)
        .env("HFX_BINARY", env!("CARGO_BIN_EXE_hfx"))
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .env_remove("HFX_PYTHON")
        .output()
        .unwrap()
}

fn plugin_sets() -> [String; 2] {
    ["plugins/dynamo", "plugins/onnx"].map(|p| root().join(p).display().to_string())
}

/// `check_api.py CHECK BACKEND WORK FOLDERS...` in a fresh folder, with the
/// plugin sets `sets` (by name under `plugins/`): it prints `ok: BACKEND`
/// and leaves no scratch.
fn check_backend(check: &str, backend: &str, sets: &[&str]) {
    let work = tempfile::tempdir().unwrap();
    let folders: Vec<String> =
        sets.iter().map(|s| root().join("plugins").join(s).display().to_string()).collect();
    let mut args = vec![check, backend, work.path().to_str().unwrap()];
    args.extend(folders.iter().map(String::as_str));
    assert!(assert_ok(&check_api(&args)).contains(&format!("ok: {backend}")));
    assert_no_scratch_left(work.path());
}

fn assert_ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// A Llama loaded from its folder, then changed in memory, exported by
/// `hfx.export(..., verify=True)` to ONNX: the artifact is the model in
/// memory (not its checkpoint), whose parameters stay the same objects.
#[test]
#[ignore = "full tier: another artifact from the caller's live model (hfx_export_for_generation_exports_the_callers_live_model_to_onnx runs the caller-served export)"]
fn hfx_export_traces_the_callers_live_model_to_onnx() {
    check_backend("live", "onnx", &["dynamo", "onnx"]);
}

/// The same to a `.pt2` (`backend="dynamo"`).
#[test]
#[ignore = "full tier: another artifact from the caller's live model (hfx_export_for_generation_exports_the_callers_live_model_to_onnx runs the caller-served export)"]
fn hfx_export_traces_the_callers_live_model_to_pt2() {
    check_backend("live", "dynamo", &["dynamo"]);
}

/// The ExecuTorch backend through the caller: its edge program maps the
/// caller's shared memory in the caller's own process.
#[test]
#[ignore = "full tier: the caller-served ExecuTorch export (hfx_export_for_generation_exports_the_callers_live_model_to_onnx runs the caller-served export)"]
fn hfx_export_traces_the_callers_live_model_to_pte() {
    check_backend("live", "executorch", &["dynamo", "executorch"]);
}

/// `hfx.export_for_generation` of a Llama whose output head was changed in
/// memory, verified: the ONNX folder generates the live model's greedy
/// tokens, not its checkpoint's.
#[test]
fn hfx_export_for_generation_exports_the_callers_live_model_to_onnx() {
    check_backend("generation", "onnx", &["dynamo", "onnx"]);
}

/// The same to `.pt2` components.
#[test]
#[ignore = "full tier: the fast tier's ONNX generation export keeps the mechanism"]
fn hfx_export_for_generation_exports_the_callers_live_model_to_pt2() {
    check_backend("generation", "dynamo", &["dynamo"]);
}

/// SIGINT while the trace runs with the patch plugins' shims in place:
/// KeyboardInterrupt in the caller, every patched target the object it was,
/// the model's settings as they were, nothing written, no scratch left.
#[test]
fn ctrl_c_during_hfx_export_restores_the_callers_model_and_patches() {
    let work = tempfile::tempdir().unwrap();
    let [dynamo, onnx] = plugin_sets();
    let out = check_api(&["interrupt", work.path().to_str().unwrap(), &dynamo, &onnx]);
    assert!(assert_ok(&out).contains("ok: interrupted"));
}

/// `--model-caller` takes two open pipes; anything else is one line.
#[test]
fn model_caller_descriptors_that_are_not_pipes_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for fds in ["0,1", "3", "300,301"] {
        let out = Command::new(env!("CARGO_BIN_EXE_hfx"))
            .args(["run", "--backend", "onnx", "-o"])
            .arg(dir.path().join("m.onnx"))
            .args(["--model-caller", fds])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{fds}: {stderr}");
        assert!(stderr.contains(&format!("--model-caller {fds}:")), "{fds}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{fds}: {stderr}");
    }
}

/// The site-packages of the checkout's environment (torch, transformers, ...).
fn checkout_site_packages() -> PathBuf {
    let out = Command::new(python())
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .unwrap();
    PathBuf::from(assert_ok(&out).trim())
}

/// A fresh venv: its own `hfx` and `hfx_worker` only from the wheel. torch
/// and transformers (the project's pins) are the checkout's environment's,
/// reached through a `.pth` file rather than a second 4 GB install.
fn fresh_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    assert_ok(&Command::new(python()).args(["-m", "venv"]).arg(&venv).output().unwrap());
    let python = venv.join("bin/python");
    let out = Command::new(&python)
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .unwrap();
    let own = PathBuf::from(assert_ok(&out).trim());
    std::fs::write(
        own.join("checkout-packages.pth"),
        format!("{}\n", checkout_site_packages().display()),
    )
    .unwrap();
    python
}

/// `cargo xtask wheel`, installed with pip into a fresh venv: the venv's
/// `hfx` command finds its default plugin sets and its worker environment
/// from the venv, and `import hfx` exports a live, changed Llama to ONNX and
/// `.pt2` with `verify=True`, with no plugin folder and no binary named.
#[test]
#[ignore = "full tier: the wheel built and installed into a fresh venv (the other python_api tests run the same module from the checkout)"]
fn the_wheel_installs_into_a_fresh_venv_and_exports_a_live_model() {
    let dir = tempfile::tempdir().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let wheels = dir.path().join("wheels");
    let built = Command::new(cargo)
        .current_dir(root())
        .args(["xtask", "wheel", "--debug", "--out"])
        .arg(&wheels)
        .output()
        .unwrap();
    assert_ok(&built);
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel");
    let python = fresh_venv(dir.path());
    let venv = python.parent().unwrap().parent().unwrap().to_path_buf();
    assert_ok(
        &Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-index", "--no-deps"])
            .arg(&wheel)
            .output()
            .unwrap(),
    );
    for file in ["bin/hfx", "share/hfx/plugins/onnx/translate-matmul/plugin.toml"] {
        assert!(venv.join(file).exists(), "the wheel installed no {file}");
    }
    let doctor =
        Command::new(venv.join("bin/hfx")).arg("doctor").env_remove("HFX_PYTHON").output().unwrap();
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        stdout.contains(&format!("python        {}", venv.join("bin/python").display())),
        "the venv's Python is not the worker's: {stdout}"
    );
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    for backend in ["onnx", "dynamo"] {
        let out = Command::new(&python)
            .arg(root().join("tests/python/check_api.py"))
            .args(["live", backend, work.to_str().unwrap()])
            .current_dir(&work)
            .env_remove("PYTHONPATH")
            .env_remove("HFX_BINARY")
            .env_remove("HFX_PYTHON")
            .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
            .output()
            .unwrap();
        assert!(assert_ok(&out).contains(&format!("ok: {backend}")));
    }
    assert_no_scratch_left(&work);
}
