//! Builds plugin crates (folders holding both `Cargo.toml` and `plugin.toml`)
//! into the WebAssembly components their manifests name, written beside
//! `plugin.toml`: the one implementation behind `hfx plugins build` and
//! `cargo xtask build-plugins`.
//!
//! Route (docs/toolchain.md): rustup has no wasm32 standard library here, so
//! guests are compiled by Debian's `rustc-web` with its std sources
//! (`-Zbuild-std`) for `wasm32-unknown-unknown`, which imports no WASI; the
//! core module becomes a component in process with `wit-component`.

use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The Debian packages of the guest toolchain. `rust-web-llvm` ships
/// `rust-lld` as a link to `lld-22` without depending on it: both are named.
pub const PACKAGES: &[&str] =
    &["rustc-web", "cargo-web", "rust-web-src", "rust-web-llvm", "lld-22"];
/// Where those packages install; the environment variable names another prefix.
pub const DEFAULT_PREFIX: &str = "/usr";
pub const PREFIX_VARIABLE: &str = "HFX_GUEST_TOOLCHAIN";
pub const TARGET: &str = "wasm32-unknown-unknown";
/// The cargo profile guests are built with (small, no unwinding): defined by
/// the crate's workspace, as `hfx plugins new` writes it.
pub const PROFILE: &str = "plugin";
/// The component file when the manifest names none; the host reads it from here.
pub const DEFAULT_COMPONENT: &str = "plugin.wasm";
/// How deep below a folder given plugin crates are looked for (`plugins/<backend>/<name>`).
const SEARCH_DEPTH: u32 = 3;

/// The guest toolchain: a prefix holding `bin/cargo`, `bin/rustc`,
/// `bin/rust-lld` and std's sources.
pub struct Toolchain {
    prefix: PathBuf,
    /// `rustc -V`: `-Zbuild-std` is unstable and Debian moves `rustc-web`
    /// forward, so a build says which compiler it used.
    pub version: String,
}

impl Toolchain {
    /// The toolchain under `$HFX_GUEST_TOOLCHAIN`, else under `/usr`.
    pub fn find() -> Result<Toolchain> {
        let prefix = std::env::var_os(PREFIX_VARIABLE)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PREFIX));
        Toolchain::at(&prefix)
    }

    /// The toolchain under `prefix`; a part missing is one line naming the
    /// package that holds it and the command that installs them all.
    pub fn at(prefix: &Path) -> Result<Toolchain> {
        let parts = [
            ("bin/rustc", "rustc-web"),
            ("bin/cargo", "cargo-web"),
            ("lib/rustlib/src/rust/library/std/Cargo.toml", "rust-web-src"),
            ("bin/rust-lld", "rust-web-llvm and lld-22"),
        ];
        for (part, package) in parts {
            // `exists` follows links: a `rust-lld` whose `lld-22` is missing is missing.
            if !prefix.join(part).exists() {
                bail!(
                    "the plugin toolchain is incomplete: no {} (Debian's {package}); install it with `apt-get install --no-install-recommends {}` as root (a checkout's `cargo xtask install-guest-toolchain` runs that)",
                    prefix.join(part).display(),
                    PACKAGES.join(" ")
                );
            }
        }
        let rustc = prefix.join("bin/rustc");
        let out = Command::new(&rustc)
            .arg("-V")
            .output()
            .with_context(|| format!("running {} -V", rustc.display()))?;
        if !out.status.success() {
            bail!("{} -V exited with {}", rustc.display(), out.status);
        }
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(Toolchain { prefix: prefix.to_path_buf(), version })
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.prefix.join("bin").join(name)
    }
}

/// A plugin crate and the component file its manifest names.
#[derive(Debug, Clone)]
pub struct PluginCrate {
    pub dir: PathBuf,
    pub package: String,
    pub component: String,
    /// A workspace of its own: it resolves its own dependencies (no `--locked`).
    pub standalone: bool,
    /// Crates with equal keys may build in one cargo run (`build_all`).
    build_group: String,
}

/// How crates are built.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Cargo's target folder (std is compiled once per folder); else the
    /// crate's workspace's own.
    pub target_dir: Option<PathBuf>,
    /// `--locked` for crates that are members of a workspace with a lockfile.
    pub locked: bool,
    /// Cargo's progress lines off (its errors still show).
    pub quiet: bool,
}

/// What one build wrote.
#[derive(Debug, Clone)]
pub struct Built {
    pub component: PathBuf,
    pub bytes: usize,
}

/// The plugin crates at or below each of `dirs`, folder by folder.
pub fn find_all(dirs: &[PathBuf]) -> Result<Vec<PluginCrate>> {
    let mut found = Vec::new();
    for dir in dirs {
        found.extend(find_crates(dir)?);
    }
    Ok(found)
}

/// The plugin crates at or below `dir` (down to `plugins/<backend>/<name>`),
/// in path order; none found is an error naming the folder.
pub fn find_crates(dir: &Path) -> Result<Vec<PluginCrate>> {
    let dir =
        std::fs::canonicalize(dir).with_context(|| format!("plugin folder {}", dir.display()))?;
    let mut found = Vec::new();
    walk(&dir, SEARCH_DEPTH, &mut found)?;
    if found.is_empty() {
        bail!(
            "{}: no plugin crate (a folder with both Cargo.toml and plugin.toml) here or below; `hfx plugins new NAME --kind KIND` makes one",
            dir.display()
        );
    }
    found.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(found)
}

fn walk(dir: &Path, depth: u32, found: &mut Vec<PluginCrate>) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    if dir.join("Cargo.toml").is_file() && dir.join("plugin.toml").is_file() {
        found.push(read_crate(dir)?);
        return Ok(());
    }
    if depth == 0 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !name.starts_with('.') && name != "target" && name != "src" {
            walk(&path, depth - 1, found)?;
        }
    }
    Ok(())
}

/// The package name and the component file; only these fields are read
/// (the host validates the whole manifest when it loads the plugin).
fn read_crate(dir: &Path) -> Result<PluginCrate> {
    let table = |file: &str| -> Result<toml::Table> {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{}", path.display()))
    };
    let cargo = table("Cargo.toml")?;
    let package = cargo
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .with_context(|| format!("{}: no [package] name", dir.join("Cargo.toml").display()))?
        .to_string();
    let manifest = table("plugin.toml")?;
    let component = match manifest.get("plugin").and_then(|p| p.get("component")) {
        None => DEFAULT_COMPONENT.to_string(),
        Some(toml::Value::String(name)) => name.clone(),
        Some(_) => bail!("{}: `component` is a file name", dir.join("plugin.toml").display()),
    };
    let mut parts = Path::new(&component).components();
    if !matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None)) {
        bail!(
            "{}: component `{component}` is not a file name beside plugin.toml",
            dir.join("plugin.toml").display()
        );
    }
    let standalone = cargo.contains_key("workspace");
    let build_group = build_group(dir, standalone, cargo);
    Ok(PluginCrate { dir: dir.to_path_buf(), package, component, standalone, build_group })
}

/// Compiles `plugin` to a core module and writes its component.
pub fn build(toolchain: &Toolchain, plugin: &PluginCrate, options: &Options) -> Result<Built> {
    let mut built = build_all(toolchain, std::slice::from_ref(plugin), options)?;
    Ok(built.remove(0))
}

/// Compiles `plugins` and writes their components, in as few cargo runs as
/// feature unification allows: crates of one workspace whose manifests are
/// the same but for `[package]` build in one run, which compiles them in
/// parallel (cargo unifies the features of the crates one run builds: with
/// the same dependency tables, each gets exactly what it would alone; the
/// SDK's features choose a plugin's WIT world). The components, in the
/// order of `plugins`.
pub fn build_all(
    toolchain: &Toolchain,
    plugins: &[PluginCrate],
    options: &Options,
) -> Result<Vec<Built>> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, plugin) in plugins.iter().enumerate() {
        match groups.iter_mut().find(|(key, _)| *key == plugin.build_group) {
            Some((_, members)) => members.push(index),
            None => groups.push((plugin.build_group.clone(), vec![index])),
        }
    }
    let mut built: Vec<Option<Built>> = vec![None; plugins.len()];
    for (_, members) in &groups {
        let crates: Vec<&PluginCrate> = members.iter().map(|&i| &plugins[i]).collect();
        let stdout = cargo_build(toolchain, &crates, options)?;
        for &index in members {
            built[index] = Some(write_component(&plugins[index], &stdout)?);
        }
    }
    Ok(built.into_iter().map(|b| b.expect("every plugin is in a group")).collect())
}

/// What decides whether two crates may build in one cargo run: a standalone
/// crate builds alone; members of a workspace build together when their
/// manifests (`cargo`), `[package]` aside, are the same.
fn build_group(dir: &Path, standalone: bool, mut cargo: toml::Table) -> String {
    if standalone {
        return format!("standalone {}", dir.display());
    }
    cargo.remove("package");
    format!("{} {cargo}", workspace_root(dir).display())
}

/// The nearest folder above `dir` whose `Cargo.toml` declares a workspace
/// (`dir` itself when none does: cargo would refuse the crate anyway).
fn workspace_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .skip(1)
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .ok()
                .and_then(|text| text.parse::<toml::Table>().ok())
                .is_some_and(|t| t.contains_key("workspace"))
        })
        .unwrap_or(dir)
        .to_path_buf()
}

/// One cargo run building `crates` (one workspace's, or one standalone
/// crate) for the guest target; its JSON messages.
fn cargo_build(
    toolchain: &Toolchain,
    crates: &[&PluginCrate],
    options: &Options,
) -> Result<Vec<u8>> {
    let first = crates[0];
    let manifest = first.dir.join("Cargo.toml");
    let mut cmd = Command::new(toolchain.bin("cargo"));
    let path = format!("{}:/usr/bin:/bin", toolchain.prefix.join("bin").display());
    cmd.current_dir(&first.dir)
        // Only the guest toolchain: rustup's proxies must not leak into the build.
        .env("PATH", path)
        .env("RUSTC", toolchain.bin("rustc"))
        .env("RUSTDOC", toolchain.bin("rustdoc"))
        // `-Zbuild-std` on a stable compiler.
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .args(["build", "--profile", PROFILE, "--target", TARGET])
        .arg("-Zbuild-std=std,panic_abort")
        // Every crate's errors, not only the first failing one's.
        .arg("--keep-going")
        // Diagnostics rendered on stderr; stdout carries the artifacts as JSON.
        .arg("--message-format=json-render-diagnostics")
        .arg("--manifest-path")
        .arg(&manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for plugin in crates {
        cmd.arg("-p").arg(&plugin.package);
    }
    if let Some(dir) = &options.target_dir {
        cmd.arg("--target-dir").arg(dir);
    }
    if options.locked && !first.standalone {
        cmd.arg("--locked");
    }
    if options.quiet {
        cmd.arg("--quiet");
    }
    let out =
        cmd.output().with_context(|| format!("starting {}", toolchain.bin("cargo").display()))?;
    if !out.status.success() {
        let names: Vec<String> =
            crates.iter().map(|p| format!("`{}` ({})", p.package, p.dir.display())).collect();
        bail!(
            "building plugin crate {}: cargo exited with {} (its messages are above)",
            names.join(", "),
            out.status
        );
    }
    Ok(out.stdout)
}

/// `plugin`'s component, from the core module cargo's `messages` name, written beside its manifest.
fn write_component(plugin: &PluginCrate, messages: &[u8]) -> Result<Built> {
    let manifest = plugin.dir.join("Cargo.toml");
    let core = core_module(messages, &manifest).with_context(|| {
        format!("building plugin crate `{}`: cargo wrote no WebAssembly module (is it `crate-type = [\"cdylib\"]`?)", plugin.package)
    })?;
    let module = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    let component = encode_component(&module).with_context(|| format!("{}", core.display()))?;
    let written = plugin.dir.join(&plugin.component);
    let tmp = plugin.dir.join(format!(".{}.tmp", plugin.component));
    std::fs::write(&tmp, &component).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &written).with_context(|| format!("writing {}", written.display()))?;
    Ok(Built { component: written, bytes: component.len() })
}

/// The `.wasm` cargo reports for the cdylib of the crate at `manifest`.
fn core_module(json_lines: &[u8], manifest: &Path) -> Option<PathBuf> {
    let manifest = std::fs::canonicalize(manifest).ok()?;
    let text = String::from_utf8_lossy(json_lines);
    text.lines().filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()).find_map(
        |message| {
            let ours = message["reason"] == "compiler-artifact"
                && message["manifest_path"]
                    .as_str()
                    .and_then(|p| std::fs::canonicalize(p).ok())
                    .is_some_and(|p| p == manifest)
                && message["target"]["crate_types"]
                    .as_array()
                    .is_some_and(|types| types.iter().any(|t| t == "cdylib"));
            if !ours {
                return None;
            }
            message["filenames"]
                .as_array()?
                .iter()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))
                .map(PathBuf::from)
        },
    )
}

/// Core module → component, validated.
pub fn encode_component(module: &[u8]) -> Result<Vec<u8>> {
    wit_component::ComponentEncoder::default()
        .module(module)
        .context("no component type section (does the crate call one of the SDK's export macros?)")?
        .validate(true)
        .encode()
        .context("encoding the core module as a component")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_toolchain_part_names_the_package_and_the_install_command() {
        let prefix = std::env::temp_dir().join("hfx-no-guest-toolchain");
        let error = Toolchain::at(&prefix).err().expect("no toolchain there").to_string();
        assert!(
            !error.contains('\n')
                && error.contains("bin/rustc (Debian's rustc-web)")
                && error.contains(&format!(
                    "apt-get install --no-install-recommends {}",
                    PACKAGES.join(" ")
                )),
            "{error}"
        );
    }

    #[test]
    fn a_folder_without_plugin_crates_and_a_component_outside_the_crate_are_refused() {
        let dir = std::env::temp_dir().join(format!("hfx-plugin-build-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/src")).unwrap();
        let error = find_crates(&dir).unwrap_err().to_string();
        assert!(error.contains("no plugin crate") && error.contains("hfx plugins new"), "{error}");
        std::fs::write(dir.join("a/Cargo.toml"), "[package]\nname = \"a\"\n").unwrap();
        std::fs::write(dir.join("a/plugin.toml"), "[plugin]\ncomponent = \"../x.wasm\"\n").unwrap();
        let error = find_crates(&dir).unwrap_err().to_string();
        assert!(error.contains("is not a file name beside plugin.toml"), "{error}");
        std::fs::write(dir.join("a/plugin.toml"), "[plugin]\nbackend = \"onnx\"\n").unwrap();
        let found = find_crates(&dir).unwrap();
        assert_eq!((found[0].package.as_str(), found[0].component.as_str()), ("a", "plugin.wasm"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
