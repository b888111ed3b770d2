//! Plugin sets pinned per upstream version: resolution, the lockfile and
//! drift, `hfx plugins verify|inspect|new`, and run options from a file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use hfx::plugins::{self, ResolveError, SetError, Versions};

const V1: &str = "tests/plugins/versioned-v1";
const V2: &str = "tests/plugins/versioned-v2";

fn torch(version: &str) -> Versions {
    [("torch".to_string(), version.to_string())].into()
}

fn resolve_with(runtime: &plugins::Runtime, dirs: &[PathBuf], versions: Versions) -> Result<plugins::PluginSet, SetError> {
    plugins::load_set(runtime, plugins::discover_all(dirs)?, versions)
}

fn resolve(dirs: &[PathBuf], versions: Versions) -> Result<plugins::PluginSet, SetError> {
    resolve_with(&runtime(), dirs, versions)
}

fn versions_dirs() -> Vec<PathBuf> {
    vec![plugin_dir(V1), plugin_dir(V2)]
}

#[test]
fn the_version_matching_torch_is_selected() {
    for (torch_version, expected, rewrite) in
        [("2.12.1", "1.0.0", "aten.clamp_min.default"), ("2.13.0+cpu", "2.0.0", "aten.clamp.default"), ("2.15.0a0", "2.0.0", "aten.clamp.default")]
    {
        let runtime = runtime();
        let set = resolve_with(&runtime, &versions_dirs(), torch(torch_version)).unwrap();
        assert_eq!(set.plugins.len(), 1, "torch {torch_version}");
        assert_eq!(set.plugins[0].manifest.plugin.version, expected, "torch {torch_version}");
        assert_eq!(set.skipped.len(), 1);
        assert!(set.skipped[0].reason.contains(&format!("torch {torch_version} is outside")), "{}", set.skipped[0].reason);
        // The selected version is the one that runs.
        let (mut graph, _) = relu_add_mul();
        let fixes: Vec<&plugins::Plugin> = set.plugins.iter().collect();
        hfx::stages::fx_node_fix::run(&runtime, &fixes, &mut graph, "fx-node-fixes", hfx::stages::OnPluginError::Fail).unwrap();
        assert_eq!(targets(&graph)[0], rewrite, "torch {torch_version}");
    }
}

#[test]
fn none_or_two_matching_versions_are_errors_listing_the_candidates() {
    let error = resolve(&versions_dirs(), torch("2.16.0")).err().unwrap();
    assert!(matches!(&error, SetError::Resolve(ResolveError::NoneApplies { .. })), "{error}");
    let text = error.to_string();
    assert!(text.contains("test-versioned-fix") && text.contains("1.0.0 in") && text.contains("2.0.0 in"), "{text}");
    assert!(text.contains("torch 2.16.0 is outside >=2.13, <2.16"), "{text}");

    let unknown = resolve(&versions_dirs(), Versions::new()).err().unwrap().to_string();
    assert!(unknown.contains("torch version unknown"), "{unknown}");

    // Widen v2's range over v1's: at torch 2.12 both apply.
    let tmp = tempfile::tempdir().unwrap();
    let v2 = copy_plugin(V2, tmp.path(), |m| m.replace(">=2.13, <2.16", ">=2.12, <2.16"));
    let error = resolve(&[plugin_dir(V1), v2], torch("2.12.0")).err().unwrap();
    assert!(matches!(&error, SetError::Resolve(ResolveError::SeveralApply { .. })), "{error}");
    assert!(error.to_string().contains("2 versions apply, exactly one must"), "{error}");
}

/// Copies the plugin folder `relative` into `into`, editing its manifest.
fn copy_plugin(relative: &str, into: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    let src = plugin_dir(relative);
    let dst = into.join(src.file_name().unwrap());
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            std::fs::copy(&path, dst.join(path.file_name().unwrap())).unwrap();
        }
    }
    let manifest = std::fs::read_to_string(src.join("plugin.toml")).unwrap();
    std::fs::write(dst.join("plugin.toml"), edit(manifest)).unwrap();
    dst
}

fn hfx(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args(args)
        .current_dir(dir)
        .env("HFX_CACHE_DIR", dir.join(".cache"))
        .env("HFX_PYTHON", "/nonexistent/python") // upstream versions only from --target
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A project folder: copies of the ONNX fixes and both versioned plugins, and the example graph.
fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = tmp.path().join("plugins");
    for p in ["plugins/onnx/fix-alias", "plugins/onnx/fix-assertion", "plugins/onnx/fix-sort-stable", V1, V2] {
        copy_plugin(p, &plugins, |m| m);
    }
    std::fs::write(tmp.path().join("graph.json"), example_graph().to_json()).unwrap();
    tmp
}

#[test]
fn a_changed_plugin_fails_locked_and_warns_otherwise() {
    let project = project();
    let dir = project.path();
    let out = hfx(dir, &["plugins", "lock", "--plugins", "plugins", "--target", "torch=2.13.0"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let lock = std::fs::read_to_string(dir.join("hfx.lock")).unwrap();
    assert!(lock.contains("name = \"test-versioned-fix\"\nversion = \"2.0.0\""), "{lock}");
    assert!(lock.contains("torch = \"2.13.0\""), "{lock}");

    let fix = ["run", "--backend", "onnx", "--plugins", "plugins", "--target", "torch=2.13.0", "graph.json", "-o", "out.json"];
    let out = hfx(dir, &[&fix[..], &["--locked"]].concat());
    assert!(out.status.success(), "an unchanged set passes --locked: {:?}", text(&out));

    // Change the alias fix's component by one byte (a custom-section name: still a valid component).
    let wasm = dir.join("plugins/fix-alias/onnx_fix_alias.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    let at = bytes.windows(9).position(|w| w == b"producers").expect("a producers section");
    bytes[at + 8] = b'z';
    std::fs::write(&wasm, bytes).unwrap();

    let out = hfx(dir, &[&fix[..], &["--locked"]].concat());
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("plugin `onnx-fix-alias`: component changed (locked sha256"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let out = hfx(dir, &fix);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("warning: drift from hfx.lock: plugin `onnx-fix-alias`: component changed"), "{stderr}");
    assert!(stdout.contains("nodes: 5 -> 1"), "{stdout}");
}

#[test]
fn upstream_drift_is_named_with_both_versions() {
    let project = project();
    let dir = project.path();
    assert!(hfx(dir, &["plugins", "lock", "--plugins", "plugins", "--target", "torch=2.13.0"]).status.success());
    let out = hfx(dir, &["plugins", "verify", "--plugins", "plugins", "--target", "torch=2.14.1", "--locked"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("torch: locked 2.13.0, found 2.14.1"), "{stderr}");
    // Moving to torch 2.12 also swaps the versioned plugin: both differences are named.
    let out = hfx(dir, &["plugins", "verify", "--plugins", "plugins", "--target", "torch=2.12.0", "--locked"]);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("plugin `test-versioned-fix`: locked version 2.0.0, found 1.0.0"), "{stderr}");
    assert!(stderr.contains("torch: locked 2.13.0, found 2.12.0"), "{stderr}");
}

#[test]
fn list_shows_skipped_plugins_and_why() {
    let project = project();
    let out = hfx(project.path(), &["plugins", "list", "--plugins", "plugins", "--target", "torch=2.14.0"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let line = |version: &str| stdout.lines().find(|l| l.starts_with("test-versioned-fix") && l.contains(version)).unwrap().to_string();
    assert!(line(" 2.0.0 ").contains("active") && line(" 2.0.0 ").contains("torch >=2.13, <2.16"), "{stdout}");
    assert!(line(" 1.0.0 ").contains("skipped: torch 2.14.0 is outside >=2.11, <2.13"), "{stdout}");
}

#[test]
fn run_options_come_from_a_config_file_and_flags_override_it() {
    let project = project();
    let dir = project.path();
    std::fs::write(
        dir.join("export.toml"),
        "backend = \"onnx\"\ninput = \"graph.json\"\noutput = \"from-config.json\"\nplugins = [\"plugins\"]\n\
         on-plugin-error = \"skip\"\n[targets]\ntorch = \"2.13.0\"\n[sandbox]\nmemory-mib = 32\n",
    )
    .unwrap();
    let out = hfx(dir, &["run", "--config", "export.toml"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(dir.join("from-config.json").exists());
    let out = hfx(dir, &["run", "--config", "export.toml", "-o", "from-flag.json", "--target", "torch=2.16.0"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "the flag's torch 2.16 must win over the config's 2.13");
    assert!(stderr.contains("none of its 2 versions applies"), "{stderr}");
    std::fs::write(dir.join("bad.toml"), "backend = \"onnx\"\nbakend = 1\n").unwrap();
    let out = hfx(dir, &["run", "--config", "bad.toml"]);
    assert!(text(&out).1.contains("bad.toml: unknown field `bakend`"), "{:?}", text(&out));
}

#[test]
fn shipped_selftests_are_current_and_verify_passes() {
    // The ONNX fixes ship self-tests made from the test graphs (HFX_BLESS=1 rewrites them).
    let cases = [
        ("plugins/onnx/fix-alias", alias_graph().0, vec!["aten.mul.Tensor"]),
        ("plugins/onnx/fix-sort-stable", sort_stable_graph().0, vec!["aten.sort.default"]),
        ("plugins/onnx/fix-assertion", assertion_graph(), vec!["aten.add.Tensor"]),
    ];
    for (plugin, graph, expected) in cases {
        let path = root().join(plugin).join("selftest/basic.json");
        let case = format!("{{\n\"input\": {},\n\"expect-targets\": {expected:?}\n}}\n", graph.to_json());
        if std::env::var_os("HFX_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &case).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), case, "HFX_BLESS=1 updates {}", path.display());
    }
    let out = hfx(&root(), &["plugins", "verify", "--plugins", "plugins/onnx", "--no-cache"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("onnx-fix-alias") && l.contains("self-tests: 1/1 passed")), "{stdout}");
}

#[test]
fn inspect_shows_world_hashes_and_manifest() {
    let out = hfx(&root(), &["plugins", "inspect", "onnx-fix-alias", "--plugins", "plugins/onnx", "--no-cache"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("world:            hfx:plugin/fx-node-fix@0.1.0"), "{stdout}");
    assert!(stdout.contains("imports:          hfx:plugin/types@0.1.0"), "{stdout}");
    assert!(stdout.contains("exports:          describe, apply"), "{stdout}");
    assert!(stdout.contains("name = \"onnx-fix-alias\""), "{stdout}");
}

#[test]
fn a_new_plugin_builds_and_passes_verify_as_generated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-fix");
    let out = hfx(tmp.path(), &["plugins", "new", "--kind", "fx-node-fix", "my-fix", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let build = Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--package", "xtask", "--", "build-plugins"])
        .arg(&dir)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(build.status.success(), "{:?}", text(&build));
    let out = hfx(tmp.path(), &["plugins", "verify", "--plugins", dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("my-fix") && stdout.contains("self-tests: 1/1 passed"), "{stdout}");
}
