//! Project tasks that need more than cargo.
//!
//! `cargo xtask build-plugins` builds every plugin crate (a folder holding both
//! `Cargo.toml` and `plugin.toml`, under `plugins/` and `tests/plugins/`) to a
//! WebAssembly component beside its `plugin.toml`, with the crate
//! `hfx-plugin-build` (`plugin-build/`), as `hfx plugins build` does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use hfx_plugin_build::PluginCrate;

use anyhow::{bail, Context, Result};

#[cfg(test)]
mod code_map;
mod fuzz;
#[cfg(test)]
mod layers;

/// The browser the report test opens `hfx run --report`'s page in, headless.
const TEST_BROWSER: &str = "chromium";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-plugins") => build_plugins(&args[1..]).map(drop),
        Some("install-guest-toolchain") => install_guest_toolchain(),
        Some("test") => test(&args[1..]),
        Some("lint") => lint_rust().and_then(|()| lint_python()),
        Some("setup-python") => setup_python(),
        Some("install") => install(&args[1..]),
        Some("wheel") => wheel(&args[1..]).map(drop),
        Some("fuzz") => fuzz::fuzz(&args[1..]),
        Some("sweep") => sweep(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask build-plugins [CRATE-DIR...] | install [--prefix DIR] [--debug | --binary FILE] [--built-plugins] [--no-setup] | wheel [--debug] [--out DIR] | install-guest-toolchain | setup-python | lint | test [--full | --nightly] [CARGO-TEST-ARGS...] | fuzz [--seconds N] [TARGET...] | sweep [SWEEP-ARGS...]");
            std::process::exit(2)
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The project's test command: check formatting and lints, build every
/// plugin, then run the host's tests (which load the freshly built components).
/// Without `--full`, the fast tier: every test not marked `#[ignore = "full
/// tier: ..."]` (the export matrix's rows not marked fast are ignored trials);
/// `--full` runs those too (`--include-ignored`), `--nightly` the sweep besides.
fn test(extra: &[String]) -> Result<()> {
    let tier = if extra.iter().any(|a| a == "--nightly") {
        Tier::Nightly
    } else if extra.iter().any(|a| a == "--full") {
        Tier::Full
    } else {
        Tier::Fast
    };
    let args = with_tier(extra, tier);
    // The Python environment is gigabytes to download and unpack (network
    // and disk), the Rust side is compilation (CPU): each in its own thread,
    // the tests built before they wait for the environment.
    let python = std::thread::spawn(|| setup_python().and_then(|()| lint_python()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build_args = args.iter().take_while(|a| *a != "--");
    let rust = lint_rust()
        .and_then(|()| install_test_browser())
        .and_then(|()| build_plugins(&[]))
        .and_then(|_| {
            run(Command::new(&cargo)
                .current_dir(workspace_root())
                .args(["test", "--locked", "--no-run"])
                .args(build_args))
        });
    let python = python.join().map_err(|_| anyhow::anyhow!("the Python setup thread panicked"))?;
    rust?;
    python?;
    run(Command::new(cargo).current_dir(workspace_root()).args(["test", "--locked"]).args(args))
}

/// Ignored tests that are measurements, not tests: they need inputs a bench
/// script makes (`bench/pt2_bench.py`), so no tier runs them.
const BENCHMARKS: &[&str] = &["pt2::weight_check_cost_on_a_125m_llama"];

/// Ignored tests too long for the full tier (an hour or more on 2 cores):
/// the nightly tier runs them beside it.
const NIGHTLY: &[&str] = &["onnx::every_architecture_hfx_passed_in_the_sweep_still_passes"];

/// The test tiers: the fast one (`cargo xtask test`, CI's), the full one
/// (`--full`: the ignored tests too) and the nightly one (`--nightly`: the
/// full tier and the sweep).
#[derive(Clone, Copy, PartialEq)]
enum Tier {
    Fast,
    Full,
    Nightly,
}

/// `cargo test`'s arguments for `extra` without the tier's flag; past the
/// fast tier, with `--include-ignored` among the test binaries' arguments
/// (after `--`), the benchmarks skipped, and the nightly tests unless nightly.
fn with_tier(extra: &[String], tier: Tier) -> Vec<String> {
    let mut args: Vec<String> =
        extra.iter().filter(|a| *a != "--full" && *a != "--nightly").cloned().collect();
    if tier != Tier::Fast {
        if !args.iter().any(|a| a == "--") {
            args.push("--".into());
        }
        args.push("--include-ignored".into());
        let nightly = if tier == Tier::Nightly { &[][..] } else { NIGHTLY };
        for skipped in BENCHMARKS.iter().chain(nightly) {
            args.extend(["--skip".into(), skipped.to_string()]);
        }
    }
    args
}

/// Formatting and lints of the Rust side, as CI enforces them: rustfmt over
/// every crate (the workspace, the fuzz targets, the example plugins), clippy
/// with warnings as errors on the host-side crates.
fn lint_rust() -> Result<()> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("==> cargo fmt --check");
    run(Command::new(&cargo).current_dir(&root).args(["fmt", "--all", "--check"]))?;
    // The crates outside the workspace: the fuzz targets and each example plugin.
    let mut separate = vec![root.join("fuzz")];
    for entry in std::fs::read_dir(root.join("examples/plugins"))? {
        separate.push(entry?.path());
    }
    for dir in separate.iter().filter(|dir| dir.join("Cargo.toml").exists()) {
        run(Command::new(&cargo).current_dir(dir).args(["fmt", "--check"]))?;
    }
    eprintln!("==> cargo clippy -- -D warnings");
    run(Command::new(&cargo).current_dir(&root).args([
        "clippy",
        "--locked",
        "--all-targets",
        "--quiet",
        "--",
        "-D",
        "warnings",
    ]))
}

/// ruff's formatter and linter over all Python, as CI enforces them (ruff
/// installed into `.venv` first).
fn lint_python() -> Result<()> {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-cache-dir",
            "-r",
        ])
        .arg(root.join("tools/requirements-lint.txt")))?;
    eprintln!("==> ruff format --check; ruff check");
    let ruff = root.join(".venv/bin/ruff");
    run(Command::new(&ruff).current_dir(&root).args(["format", "--check", "--quiet", "."]))?;
    run(Command::new(&ruff).current_dir(&root).args(["check", "--quiet", "."]))
}

/// The architecture sweep (`bench/sweep.py`, not part of `test`): hfx and the
/// reference exporter side by side on tiny random models, the table in
/// `docs/sweep.md`. Builds hfx in release first unless `--hfx PATH` is given.
fn sweep(extra: &[String]) -> Result<()> {
    let root = workspace_root();
    let mut python = Command::new(root.join(".venv/bin/python"));
    python.current_dir(&root).arg("bench/sweep.py").args(extra);
    if !extra.iter().any(|a| a == "--hfx" || a.starts_with("--hfx=")) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run(Command::new(cargo).current_dir(&root).args([
            "build",
            "--release",
            "--locked",
            "-p",
            "hfx",
        ]))?;
        python.arg("--hfx").arg(target_dir(&root).join("release/hfx"));
    }
    run(&mut python)
}

/// The Python environment where PyTorch model code runs (trace worker, test
/// fixtures, reference outputs): `.venv` with `host/worker/requirements.txt`,
/// then `requirements-no-deps.txt` without dependencies. pip keeps no cache:
/// the environment is installed once, and a cache would hold a second copy
/// of torch's CUDA wheels on the disk.
fn setup_python() -> Result<()> {
    let root = workspace_root();
    let venv = root.join(".venv");
    if !venv.join("bin/python").exists() {
        eprintln!("==> creating {}", venv.display());
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    // The second file's packages come without their declared dependencies
    // (the first file holds the ones they import).
    for (file, flags) in
        [("requirements.txt", &[][..]), ("requirements-no-deps.txt", &["--no-deps"][..])]
    {
        let requirements = root.join("host/worker").join(file);
        eprintln!(
            "==> pip install {}-r {}",
            flags.iter().map(|f| format!("{f} ")).collect::<String>(),
            requirements.strip_prefix(&root).unwrap_or(&requirements).display()
        );
        run(Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir"])
            .args(flags)
            .arg("-r")
            .arg(&requirements))
        .context("installing the Python requirements (torch's Linux wheel pulls ~4 GB of CUDA libraries)")?;
    }
    Ok(())
}

/// `cargo xtask install [--prefix DIR] [--debug | --binary FILE] [--built-plugins] [--no-setup]`: hfx as a
/// tool (default prefix `~/.local`), laid out as `hfx::installed` finds it:
/// `bin/hfx`; `share/hfx/plugins/` (every shipped plugin: manifest, built
/// component, self-tests), the default plugin sets; `share/hfx/sdk/<version>/`
/// (the SDK, its macros, the dtype table and the WIT contract, for plugin
/// crates outside any checkout); then `hfx setup` creates the worker's
/// environment in `share/hfx/venv` (not with `--no-setup`). `--debug`
/// installs the debug build, `--binary` one already built (the tests' own);
/// `--built-plugins` takes the components `cargo xtask build-plugins` left
/// (the tests': built before they run) instead of building them again.
/// Every file is written to a
/// temp name and renamed; a folder from an earlier install is replaced whole.
fn install(args: &[String]) -> Result<()> {
    let (mut prefix, mut binary) = (None, None);
    let (mut debug, mut setup, mut build) = (false, true, true);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--prefix" => prefix = Some(PathBuf::from(rest.next().context("--prefix needs a folder")?)),
            "--debug" => debug = true,
            // A binary already built (the tests' own): nothing is compiled.
            "--binary" => binary = Some(PathBuf::from(rest.next().context("--binary needs a file")?)),
            "--no-setup" => setup = false,
            "--built-plugins" => build = false,
            other => bail!("install: unknown argument `{other}` (--prefix DIR, --debug, --binary FILE, --built-plugins, --no-setup)"),
        }
    }
    let prefix = match prefix {
        Some(p) => p,
        None => PathBuf::from(std::env::var_os("HOME").context("no $HOME: give --prefix")?)
            .join(".local"),
    };
    let prefix = if prefix.is_absolute() { prefix } else { std::env::current_dir()?.join(prefix) };
    let root = workspace_root();
    let plugins = if build {
        build_plugins(&[root.join("plugins").display().to_string()])?
    } else {
        built_plugins(&root.join("plugins"))?
    };
    let binary = match binary {
        Some(binary) => binary,
        None => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = Command::new(cargo);
            build.current_dir(&root).args(["build", "--locked", "-p", "hfx"]);
            if !debug {
                build.arg("--release");
            }
            run(&mut build)?;
            target_dir(&root).join(if debug { "debug" } else { "release" }).join("hfx")
        }
    };
    let share = prefix.join("share").join("hfx");
    std::fs::create_dir_all(prefix.join("bin"))?;
    std::fs::create_dir_all(&share)?;
    let installed = prefix.join("bin").join("hfx");
    copy_file(&binary, &installed)?;
    replace_folder(&share.join("plugins"), |staging| copy_plugin_sets(&root, &plugins, staging))?;
    // The SDK travels with hfx: a scaffolded plugin depends on this path.
    let version = env!("CARGO_PKG_VERSION");
    replace_folder(&share.join("sdk").join(version), |staging| {
        for part in ["sdk", "dtype", "wit"] {
            copy_tree(&root.join(part), &staging.join(part))?;
        }
        sdk_workspace(&root, staging)
    })?;
    eprintln!(
        "installed {} ({} plugins, SDK {version}) under {}",
        installed.display(),
        plugins.len(),
        share.display()
    );
    if setup {
        run(Command::new(&installed).arg("setup"))?;
    }
    if !std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d == prefix.join("bin")))
    {
        eprintln!(
            "note: {} is not on PATH; add it, or call {}",
            prefix.join("bin").display(),
            installed.display()
        );
    }
    Ok(())
}

/// The default plugin sets into `to`: what the host reads of each plugin,
/// nothing of its source.
/// The plugin crates under `dir`, each component already built.
fn built_plugins(dir: &Path) -> Result<Vec<PluginCrate>> {
    let crates = hfx_plugin_build::find_all(&[dir.to_path_buf()])?;
    for plugin in &crates {
        let component = plugin.dir.join(&plugin.component);
        if !component.is_file() {
            bail!("{} is not built: run `cargo xtask build-plugins`", component.display());
        }
    }
    Ok(crates)
}

fn copy_plugin_sets(root: &Path, plugins: &[PluginCrate], to: &Path) -> Result<()> {
    for plugin in plugins {
        let into = to.join(plugin.dir.strip_prefix(root.join("plugins"))?);
        std::fs::create_dir_all(&into)?;
        for file in ["plugin.toml", plugin.component.as_str()] {
            copy_file(&plugin.dir.join(file), &into.join(file))?;
        }
        if plugin.dir.join("selftest").is_dir() {
            copy_tree(&plugin.dir.join("selftest"), &into.join("selftest"))?;
        }
        // An opt-in set's marker (`plugins/onnx-ort-cpu/set.toml`) stays opt-in installed.
        let set = plugin.dir.parent().map(|d| d.join("set.toml"));
        if let Some(set) = set.filter(|s| s.is_file()) {
            copy_file(&set, &into.parent().context("a plugin has a set folder")?.join("set.toml"))?;
        }
    }
    Ok(())
}

/// The marker of a pip-installed hfx (`host/src/installed.rs`): its worker's
/// Python is the environment's own.
const PIP_MARKER: &str = "pip-installed";

/// `cargo xtask wheel [--debug] [--out DIR]`: the `hfx` wheel, built by
/// maturin (`bindings = "bin"`): the binary as the environment's `bin/hfx`,
/// the packages `hfx` (the Python API, `python/hfx`) and `hfx_worker`, the
/// default plugin sets as data under `share/hfx/plugins` (where the installed
/// binary finds them, `P/bin/hfx` → `P/share/hfx`). Assembled in
/// `target/wheel/stage`, written to `--out` (default `target/wheel`);
/// returns the wheel's path. `--debug`: cargo's dev profile (tests).
fn wheel(args: &[String]) -> Result<PathBuf> {
    let (mut out, mut debug) = (None, false);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--out" => out = Some(PathBuf::from(rest.next().context("--out needs a folder")?)),
            "--debug" => debug = true,
            other => bail!("wheel: unknown argument `{other}` (--debug, --out DIR)"),
        }
    }
    let root = workspace_root();
    let out = match out {
        Some(p) if p.is_absolute() => p,
        Some(p) => std::env::current_dir()?.join(p),
        None => root.join("target").join("wheel"),
    };
    let maturin = root.join(".venv/bin/maturin");
    if !maturin.exists() {
        bail!(
            "{} missing: `cargo xtask setup-python` installs it (tools/requirements-lint.txt)",
            maturin.display()
        );
    }
    let plugins = build_plugins(&[root.join("plugins").display().to_string()])?;
    let stage = root.join("target").join("wheel").join("stage");
    let _ = std::fs::remove_dir_all(&stage);
    let python = stage.join("python");
    copy_package(&root.join("python/hfx"), &python.join("hfx"))?;
    copy_package(&root.join("host/worker/hfx_worker"), &python.join("hfx_worker"))?;
    let share = stage.join("hfx.data/data/share/hfx");
    copy_plugin_sets(&root, &plugins, &share.join("plugins"))?;
    std::fs::write(
        share.join(PIP_MARKER),
        "hfx was installed by pip: its trace worker runs in this environment's Python.\n",
    )?;
    std::fs::write(stage.join("pyproject.toml"), wheel_pyproject(&root))?;
    std::fs::create_dir_all(&out)?;
    let mut build = Command::new(&maturin);
    build
        .current_dir(&stage)
        .args(["build", "--locked", "--quiet", "--out"])
        .arg(&out)
        .args(["--target-dir"])
        .arg(target_dir(&root));
    if debug {
        build.args(["--profile", "dev"]);
    } else {
        build.arg("--release");
    }
    run(&mut build)?;
    let name = format!("hfx-{}-", env!("CARGO_PKG_VERSION"));
    let built = std::fs::read_dir(&out)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "whl")
                && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&name))
        })
        .max_by_key(|w| w.metadata().and_then(|m| m.modified()).ok())
        .context("maturin wrote no wheel")?;
    eprintln!("wheel: {} ({} plugins)", built.display(), plugins.len());
    Ok(built)
}

/// A Python package's own files (`.py`, `.json`), never its bytecode.
fn copy_package(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "py" || e == "json") {
            copy_file(&path, &to.join(path.file_name().context("a file has a name")?))?;
        }
    }
    Ok(())
}

/// The wheel's `pyproject.toml`: the distribution named and versioned as
/// the host crate, built by maturin from the staged folder.
fn wheel_pyproject(root: &Path) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let manifest = root.join("host/Cargo.toml");
    format!(
        r#"# Written by `cargo xtask wheel`.
[build-system]
requires = ["maturin>=1.16,<2"]
build-backend = "maturin"

[project]
name = "hfx"
version = "{version}"
description = "Export PyTorch / Hugging Face models to .pt2, ONNX and ExecuTorch, with WebAssembly plugins"
requires-python = ">=3.11"
license = "Apache-2.0"

[tool.maturin]
bindings = "bin"
manifest-path = "{manifest}"
python-source = "python"
python-packages = ["hfx", "hfx_worker"]
data = "hfx.data"
"#,
        manifest = manifest.display()
    )
}

/// The installed SDK's own workspace: its crates inherit `version`, `edition`
/// and `wit-bindgen` from hfx's root manifest, which is not installed, so the
/// inherited tables are written beside them.
fn sdk_workspace(root: &Path, sdk: &Path) -> Result<()> {
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml"))?)?;
    let workspace = manifest
        .get("workspace")
        .and_then(|w| w.as_table())
        .context("Cargo.toml: no [workspace]")?;
    let mut installed = toml::Table::new();
    installed.insert("resolver".into(), "2".into());
    installed.insert(
        "members".into(),
        toml::Value::Array(["sdk", "sdk/macros", "dtype"].map(toml::Value::from).to_vec()),
    );
    for table in ["package", "dependencies"] {
        let value =
            workspace.get(table).with_context(|| format!("Cargo.toml: no [workspace.{table}]"))?;
        installed.insert(table.into(), value.clone());
    }
    let text = format!(
        "# hfx's plugin SDK as installed by `cargo xtask install`: a workspace of its own,\n# holding what its crates inherit from hfx's.\n{}",
        toml::to_string(&toml::Table::from_iter([("workspace".to_string(), toml::Value::Table(installed))]))?
    );
    std::fs::write(sdk.join("Cargo.toml"), text)?;
    Ok(())
}

/// `from` copied to `to` through a temp file and a rename, keeping its mode.
fn copy_file(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("install-tmp");
    std::fs::copy(from, &tmp)
        .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("writing {}", to.display()))?;
    Ok(())
}

/// Every file below `from` copied under `to`, except build output (`target/`)
/// and built components of crates (the SDK's own files only).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if entry.file_type()?.is_dir() {
            copy_tree(&path, &to.join(&name))?;
        } else if entry.file_type()?.is_file() {
            copy_file(&path, &to.join(&name))?;
        }
    }
    Ok(())
}

/// Fills a staging folder beside `dir` with `fill`, then swaps it in for
/// `dir`: an install never leaves a folder half old, half new.
fn replace_folder(dir: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let parent = dir.parent().context("an install folder has a parent")?;
    std::fs::create_dir_all(parent)?;
    let staging = parent.join(format!(
        ".{}.installing",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("folder")
    ));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    if let Err(e) = fill(&staging) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    let old = parent
        .join(format!(".{}.old", dir.file_name().and_then(|n| n.to_str()).unwrap_or("folder")));
    let _ = std::fs::remove_dir_all(&old);
    if dir.exists() {
        std::fs::rename(dir, &old)?;
    }
    std::fs::rename(&staging, dir)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Installs Debian's wasm-capable Rust (1.96) beside rustup's, if missing.
fn install_guest_toolchain() -> Result<()> {
    if hfx_plugin_build::Toolchain::find().is_ok() {
        return Ok(());
    }
    let packages = hfx_plugin_build::PACKAGES;
    eprintln!("==> installing the guest toolchain: apt-get install {}", packages.join(" "));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .context("apt-get install failed (run as root, or install the packages above by hand)")
}

/// Installs Debian's Chromium for the tests, if missing.
fn install_test_browser() -> Result<()> {
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join(TEST_BROWSER).is_file())
    });
    if on_path {
        return Ok(());
    }
    eprintln!("==> installing the tests' headless browser: apt-get install {TEST_BROWSER}");
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends", TEST_BROWSER])
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .context("apt-get install failed (run as root, or install chromium by hand)")
}

/// Builds the plugin crates (all, or those at or below `only`) and returns them.
fn build_plugins(only: &[String]) -> Result<Vec<PluginCrate>> {
    install_guest_toolchain()?;
    let root = workspace_root();
    let dirs: Vec<PathBuf> = if only.is_empty() {
        ["plugins", "tests/plugins"].map(|base| root.join(base)).to_vec()
    } else {
        // Named folders may be anywhere (a plugin scaffolded outside the repository).
        only.iter().map(PathBuf::from).collect()
    };
    let crates = hfx_plugin_build::find_all(&dirs)?;
    let toolchain = hfx_plugin_build::Toolchain::find()?;
    eprintln!("guest compiler: {}", toolchain.version);
    // Every crate in hfx's target folder, standalone ones too, so std is compiled once.
    let options = hfx_plugin_build::Options {
        target_dir: Some(target_dir(&root)),
        locked: true,
        quiet: true,
    };
    let start = Instant::now();
    let built = hfx_plugin_build::build_all(&toolchain, &crates, &options)?;
    for (plugin, built) in crates.iter().zip(&built) {
        eprintln!(
            "  built {:<40} {:>7} bytes  -> {}",
            plugin.package,
            built.bytes,
            built.component.strip_prefix(&root).unwrap_or(&built.component).display()
        );
    }
    eprintln!("{} plugins in {:.1} s", crates.len(), start.elapsed().as_secs_f64());
    Ok(crates)
}

/// Cargo's target folder: `$CARGO_TARGET_DIR` when set, else `target/` of the workspace.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{:?} exited with {status}", cmd.get_program());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{with_tier, Tier};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_full_tier_includes_the_ignored_tests_among_the_binaries_arguments() {
        assert_eq!(with_tier(&args(&["--test", "it"]), Tier::Fast), args(&["--test", "it"]));
        let skip = [
            "--skip",
            "pt2::weight_check_cost_on_a_125m_llama",
            "--skip",
            "onnx::every_architecture_hfx_passed_in_the_sweep_still_passes",
        ];
        assert_eq!(
            with_tier(&args(&["--full", "--test", "it"]), Tier::Full),
            args(&[&["--test", "it", "--", "--include-ignored"][..], &skip].concat())
        );
        assert_eq!(
            with_tier(&args(&["--full", "--", "onnx::"]), Tier::Full),
            args(&[&["--", "onnx::", "--include-ignored"][..], &skip].concat())
        );
        assert_eq!(
            with_tier(&args(&["--nightly", "--test", "it"]), Tier::Nightly),
            args(&[&["--test", "it", "--", "--include-ignored"][..], &skip[..2]].concat())
        );
    }
}
