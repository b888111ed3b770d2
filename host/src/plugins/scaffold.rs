//! `hfx plugins new`: a plugin crate that builds with `hfx plugins build` and
//! passes `hfx plugins test` as generated (every kind ships a self-test case).
//! Inside the hfx repository (`plugins/<backend>/<name>`) it joins the
//! workspace; elsewhere it is its own workspace depending on the SDK by path
//! (an installed hfx's own, `share/hfx/sdk/<version>`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::manifest::{Backend, PluginKind};
use crate::graph::{
    Argument, Dim, Graph, NamedArgument, OutputDecl, RangeConstraint, TensorMeta, ValueMeta,
};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Plugin name (lowercase, digits, `-`): also the crate name.
    pub name: String,
    #[arg(long, value_parser = parse_kind)]
    pub kind: PluginKind,
    #[arg(long, default_value = "onnx", value_parser = parse_backend)]
    pub backend: Backend,
    /// Folder to create [default: `<name>` here; `plugins/<backend>/<name>` at the root of the hfx repository].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The hfx-sdk crate, for a plugin outside the hfx repository [default: an installed hfx's own SDK, else that of the checkout hfx was built in].
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

fn parse_kind(s: &str) -> Result<PluginKind, String> {
    toml::Value::String(s.into())
        .try_into()
        .map_err(|_| format!("unknown kind `{s}` (patch, fx-node-fix, fx-program-fix, onnx-translation, onnx-ir-fix)"))
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    toml::Value::String(s.into()).try_into().map_err(|_| format!("unknown backend `{s}`"))
}

/// The hfx repository this binary was built from (its SDK and workspace).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ lives in the repository")
        .to_path_buf()
}

/// Whether hfx runs at the root of the repository it was built from, where
/// a new plugin joins a shipped set.
fn at_repository_root() -> bool {
    let here = std::env::current_dir().and_then(|d| d.canonicalize());
    here.is_ok_and(|here| repository().canonicalize().is_ok_and(|repo| repo == here))
}

pub fn new_plugin(args: &NewArgs) -> Result<()> {
    check_name(&args.name)?;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None if at_repository_root() => {
            Path::new("plugins").join(args.backend.as_str()).join(&args.name)
        }
        None => PathBuf::from(&args.name),
    };
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let files = render(args, &dir)?;
    for (path, text) in &files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("files live in folders"))?;
        crate::atomic::write_bytes_atomically(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("created {} ({} plugin for {})", dir.display(), args.kind, args.backend);
    println!("build:  hfx plugins build {}", dir.display());
    println!("test:   hfx plugins test {}", dir.display());
    Ok(())
}

/// A plugin name is its crate's name: lowercase letters, digits and `-`,
/// starting with a letter. A wrong one is refused saying what is wrong, with
/// the name it most likely meant.
fn check_name(name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !name.is_empty()
        && name.chars().all(allowed)
        && name.starts_with(|c: char| c.is_ascii_lowercase())
    {
        return Ok(());
    }
    let problem = if name.is_empty() {
        "is empty".to_string()
    } else if name.chars().any(|c| c.is_ascii_uppercase()) {
        "has uppercase letters".to_string()
    } else if let Some(c) = name.chars().find(|&c| !allowed(c)) {
        format!("has `{c}`")
    } else {
        "does not start with a letter".to_string()
    };
    let suggestion = kebab_case(name);
    let hint = if suggestion.is_empty() || suggestion == name {
        String::new()
    } else {
        format!(": try `{suggestion}`")
    };
    bail!(
        "plugin name `{name}` {problem}; a plugin name (also its crate's) is lowercase letters, digits and `-`, starting with a letter{hint}"
    )
}

/// `MyFix`, `my_fix`, `My Fix` → `my-fix`: words split at case changes and
/// separators, lowercased, joined by `-`; leading non-letters dropped.
fn kebab_case(name: &str) -> String {
    let mut out = String::new();
    let mut previous: Option<char> = None;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            let word_starts = c.is_ascii_uppercase()
                && previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit());
            if word_starts && !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        previous = Some(c);
    }
    let start = out.find(|c: char| c.is_ascii_lowercase()).unwrap_or(out.len());
    out[start..].trim_end_matches('-').to_string()
}

/// Relative path and content of every file of the new crate. The source
/// states the kind and the targets (its attribute), `Cargo.toml` the name and
/// version; the manifest only what the code cannot say.
fn render(args: &NewArgs, dir: &Path) -> Result<Vec<(String, String)>> {
    let (feature, source, selftest) = template(args.kind);
    let cargo = cargo_toml(&args.name, feature, dir, args.sdk.as_deref())?;
    let manifest = format!(
        "[plugin]\nbackend = \"{backend}\"\n\
         # Within a stage lower runs first (default 100).\n# order = 100\n\n\
         # The upstream versions this workaround is for; it is skipped outside them.\n\
         # [upstream]\n# torch = \">=2.12, <2.16\"\n\n[why]\nsummary = \"TODO: what breaks without this plugin\"\n\
         # upstream-issue = \"https://github.com/...\"\n",
        backend = args.backend,
    );
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo),
        ("plugin.toml".to_string(), manifest),
        ("src/lib.rs".to_string(), source.to_string()),
    ];
    files.push(("selftest/basic.json".to_string(), selftest));
    Ok(files)
}

/// In the repository's `plugins/*/*`, a workspace member; elsewhere standalone.
fn cargo_toml(name: &str, feature: &str, dir: &Path, sdk: Option<&Path>) -> Result<String> {
    let repo = repository();
    let absolute = std::env::current_dir()?.join(dir);
    let parent = absolute.parent().and_then(Path::parent).and_then(|p| p.canonicalize().ok());
    let member = sdk.is_none() && parent.is_some_and(|p| p == repo.join("plugins"));
    let package = format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n");
    if member {
        return Ok(format!("{package}[dependencies]\nhfx-sdk = {{ workspace = true, features = [\"{feature}\"] }}\n"));
    }
    // An installed hfx's own SDK (its version's), else the checkout's it was built in.
    let sdk =
        sdk.map(Path::to_path_buf).unwrap_or_else(|| match crate::installed::Installed::find() {
            Some(installed) => installed.sdk().join("sdk"),
            None => repo.join("sdk"),
        });
    let sdk = sdk.canonicalize().with_context(|| format!("the SDK at {}", sdk.display()))?;
    Ok(format!(
        "{package}[dependencies]\nhfx-sdk = {{ path = {:?}, features = [\"{feature}\"] }}\n\n\
         # A workspace of its own, with the profile `hfx plugins build` builds guests with.\n\
         [workspace]\n\n[profile.plugin]\ninherits = \"release\"\nopt-level = \"s\"\nlto = true\ncodegen-units = 1\n\
         panic = \"abort\"\nstrip = true\ndebug = false\n",
        sdk.display().to_string()
    ))
}

/// SDK feature, `src/lib.rs` and a self-test case per kind. The sources
/// are `sdk/templates/*.rs`, which the kind-coverage test plugins compile as
/// they are (the IR-fix template is the TopK fix itself, with its case), so
/// every template is a tested plugin.
fn template(kind: PluginKind) -> (&'static str, &'static str, String) {
    match kind {
        PluginKind::FxNodeFix => ("fx-node-fix", NODE_FIX, node_fix_case()),
        PluginKind::FxProgramFix => ("fx-program-fix", PROGRAM_FIX, program_fix_case()),
        PluginKind::Patch => ("patch", PATCH, PATCH_CASE.to_string()),
        PluginKind::OnnxTranslation => ("onnx-translation", TRANSLATION, translation_case()),
        PluginKind::OnnxIrFix => ("onnx-ir-fix", IR_FIX, IR_FIX_CASE.to_string()),
    }
}

fn tensor(shape: &[Dim]) -> TensorMeta {
    TensorMeta::new("float32", shape.to_vec())
}

/// `x → detach → mul(·, 2.0)`; the fix leaves only the `mul`.
fn node_fix_case() -> String {
    let shape = [Dim::Symbolic("s0".into()), Dim::Fixed(8)];
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(tensor(&shape)));
    let detach = g
        .push_node(
            0,
            "aten.detach.default",
            vec![NamedArgument::positional("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(tensor(&shape))],
        )
        .expect("valid");
    let d = g.node(detach).expect("live").output_values().next().expect("one output");
    let mul = g
        .push_node(
            0,
            "aten.mul.Tensor",
            vec![
                NamedArgument::positional("self", Argument::Tensor(d)),
                NamedArgument::positional("other", Argument::Float(2.0)),
            ],
            vec![OutputDecl::Tensor(tensor(&shape))],
        )
        .expect("valid");
    let out = g.node(mul).expect("live").output_values().next().expect("one output");
    g.set_outputs(0, vec![Argument::Tensor(out)]).expect("valid");
    case(&g, r#""expect-targets": ["aten.mul.Tensor"]"#)
}

/// An unbounded batch symbol; the fix bounds it.
fn program_fix_case() -> String {
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(tensor(&[Dim::Symbolic("s0".into())])));
    g.set_outputs(0, vec![Argument::Tensor(x)]).expect("valid");
    g.set_range_constraint("s0", RangeConstraint { min: 2, max: None }).expect("valid");
    case(&g, r#""expect-ranges": { "s0": [2, 4096] }"#)
}

/// `x → relu`, with `x`'s values: checked numerically in ONNX Runtime by `hfx plugins test`.
fn translation_case() -> String {
    let shape = [Dim::Symbolic("s0".into()), Dim::Fixed(8)];
    let mut g = Graph::new();
    let x = g.add_input(0, "x", ValueMeta::Tensor(tensor(&shape)));
    let relu = g
        .push_node(
            0,
            "aten.relu.default",
            vec![NamedArgument::positional("self", Argument::Tensor(x))],
            vec![OutputDecl::Tensor(tensor(&shape))],
        )
        .expect("valid");
    let out = g.node(relu).expect("live").output_values().next().expect("one output");
    g.set_outputs(0, vec![Argument::Tensor(out)]).expect("valid");
    // -2.0, -1.5, ..., 5.5 as little-endian float32: negatives and positives for relu.
    const RAMP: &str =
        "AAAAwAAAwL8AAIC/AAAAvwAAAAAAAAA/AACAPwAAwD8AAABAAAAgQAAAQEAAAGBAAACAQAAAkEAAAKBAAACwQA==";
    case(
        &g,
        &format!(
            r#""values": {{ "x": {{ "tensor": {{ "dtype": "float32", "shape": [2, 8], "data": "{RAMP}" }} }} }}"#
        ),
    )
}

fn case(graph: &Graph, expectation: &str) -> String {
    format!("{{\n\"input\": {},\n{expectation}\n}}\n", graph.to_json())
}

const NODE_FIX: &str = include_str!("../../../sdk/templates/fx_node_fix.rs");

const PROGRAM_FIX: &str = include_str!("../../../sdk/templates/fx_program_fix.rs");

const PATCH: &str = include_str!("../../../sdk/templates/patch.rs");

const TRANSLATION: &str = include_str!("../../../sdk/templates/onnx_translation.rs");

const PATCH_CASE: &str = include_str!("../../../sdk/templates/patch.json");

const IR_FIX: &str = include_str!("../../../plugins/onnx/fix-topk-sorted/src/lib.rs");

const IR_FIX_CASE: &str = include_str!("../../../plugins/onnx/fix-topk-sorted/selftest/topk.json");
