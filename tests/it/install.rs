//! hfx as an installed tool: `cargo xtask install --prefix P` lays out
//! `P/bin/hfx`, the default plugin sets and the SDK; the installed binary,
//! run from a folder outside the checkout with no `--plugins` and no
//! `--python`, finds its plugins and its worker environment
//! (`P/share/hfx/venv`) by itself and exports and verifies a model.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::tiny::LLAMA;
use crate::common::*;

/// The prefix of one `cargo xtask install --binary HFX --no-setup` for
/// every test here (the binary the tests already have; `--no-setup`: the
/// worker environment is the checkout's, linked, not a second 4 GB one).
fn installed() -> &'static Path {
    static PREFIX: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = root().join("target/hfx-install-test");
        let _ = std::fs::remove_dir_all(&prefix);
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(root())
            .args([
                "xtask",
                "install",
                "--no-setup",
                "--binary",
                env!("CARGO_BIN_EXE_hfx"),
                "--prefix",
            ])
            .arg(&prefix)
            .output()
            .unwrap();
        assert!(out.status.success(), "install: {}", String::from_utf8_lossy(&out.stderr));
        // The worker environment `hfx setup` would create: here the checkout's, linked.
        std::os::unix::fs::symlink(root().join(".venv"), prefix.join("share/hfx/venv")).unwrap();
        prefix
    })
}

/// Runs the installed hfx in `dir` with no `--python`: `HFX_PYTHON` removed,
/// as on a user's machine; `cache` is the component cache.
fn installed_hfx(prefix: &Path, dir: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new(prefix.join("bin/hfx"))
        .args(args)
        .current_dir(dir)
        .env_remove("HFX_PYTHON")
        .env("HFX_CACHE_DIR", cache)
        .output()
        .unwrap()
}

#[test]
fn an_installed_hfx_exports_from_any_folder_with_its_default_plugins() {
    let prefix = installed();
    let share = prefix.join("share/hfx");
    for file in [
        "plugins/onnx/translate-matmul/plugin.toml",
        "plugins/dynamo/patch-sdpa-math-cpu/plugin.toml",
        "sdk/0.1.0/sdk/Cargo.toml",
        "sdk/0.1.0/wit/0.1.0",
    ] {
        assert!(share.join(file).exists(), "the install has no {file}");
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = root().join("target/hfx-test-cache");

    let doctor = installed_hfx(prefix, dir.path(), &cache, &["doctor"]);
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{stdout}{}", String::from_utf8_lossy(&doctor.stderr));
    assert!(
        stdout.contains(&format!("python        {}", share.join("venv/bin/python").display())),
        "the installed environment is not the one found: {stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "plugins       {}",
            share.join("plugins").canonicalize().unwrap().display()
        )) && stdout.contains("everything fits"),
        "{stdout}"
    );

    let out = dir.path().join("llama.onnx");
    let run = [
        "run",
        "--backend",
        "onnx",
        "--model",
        "llama",
        "--set",
        LLAMA,
        "--dynamic",
        "--verify",
        "-o",
        out.to_str().unwrap(),
    ];
    let result = installed_hfx(prefix, dir.path(), &cache, &run);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}{stdout}", String::from_utf8_lossy(&result.stderr));
    assert!(
        out.exists() && !stdout.contains("MISMATCH") && stdout.contains("onnx-translate-matmul"),
        "{stdout}"
    );

    // Only the folders given: no translation for the first op, in one line.
    let bare = [&run[..], &["--no-default-plugins"]].concat();
    let result = installed_hfx(prefix, dir.path(), &cache, &bare);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success() && stderr.contains("no translation plugin for"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_no_scratch_left(dir.path());
}

/// `hfx plugins precompile` fills an empty cache with the default sets, and a
/// second time has nothing to compile.
#[test]
fn precompile_fills_the_component_cache_once() {
    let prefix = installed();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let first = installed_hfx(prefix, dir.path(), &cache, &["plugins", "precompile"]);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{stdout}{}", String::from_utf8_lossy(&first.stderr));
    let total: usize = stdout
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        total > 40 && stdout.contains(&format!("{total} compiled now, 0 already there")),
        "{stdout}"
    );
    let second = installed_hfx(prefix, dir.path(), &cache, &["plugins", "precompile"]);
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(stdout.contains(&format!("0 compiled now, {total} already there")), "{stdout}");
}

/// A binary outside an install has no default plugins and says how to get
/// them; `hfx setup` there names what to run instead.
#[test]
fn a_build_outside_an_install_says_where_plugins_and_setup_come_from() {
    let dir = tempfile::tempdir().unwrap();
    let hfx = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hfx")).args(args).current_dir(dir.path()).output().unwrap()
    };
    let list = hfx(&["plugins", "list"]);
    let stderr = String::from_utf8_lossy(&list.stderr);
    assert!(
        !list.status.success()
            && stderr.contains("--plugins DIR")
            && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
    let setup = hfx(&["setup"]);
    let stderr = String::from_utf8_lossy(&setup.stderr);
    assert!(
        !setup.status.success()
            && stderr.contains("cargo xtask install")
            && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
}

/// The SDK travels with hfx: `hfx plugins new` of an installed hfx, outside
/// any checkout, depends on the install's SDK (its own workspace), and the
/// crate builds and verifies as generated.
#[test]
fn a_plugin_scaffolded_by_an_installed_hfx_builds_against_its_sdk() {
    let prefix = installed();
    let dir = tempfile::tempdir().unwrap();
    let cache = root().join("target/hfx-test-cache");
    let crate_dir = dir.path().join("my-fix");
    let new = installed_hfx(
        prefix,
        dir.path(),
        &cache,
        &[
            "plugins",
            "new",
            "--kind",
            "fx-node-fix",
            "my-fix",
            "--dir",
            crate_dir.to_str().unwrap(),
        ],
    );
    assert!(new.status.success(), "{}", String::from_utf8_lossy(&new.stderr));
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let sdk = prefix
        .join("share/hfx/sdk")
        .join(env!("CARGO_PKG_VERSION"))
        .join("sdk")
        .canonicalize()
        .unwrap();
    assert!(
        manifest.contains(&format!("path = {:?}", sdk.display().to_string())),
        "not the installed SDK: {manifest}"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .current_dir(root())
        .args(["xtask", "build-plugins"])
        .arg(&crate_dir)
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", String::from_utf8_lossy(&build.stderr));
    let verify = installed_hfx(
        prefix,
        dir.path(),
        &cache,
        &["plugins", "verify", "--no-default-plugins", "--plugins", crate_dir.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success()
            && stdout.contains("my-fix")
            && stdout.contains("self-tests: 1/1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}
