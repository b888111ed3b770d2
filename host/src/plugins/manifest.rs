//! `plugin.toml`: what a plugin is, where its component is, what it targets.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Contract versions this host loads (`api` in the manifest).
pub const SUPPORTED_APIS: &[&str] = &["0.1"];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub plugin: PluginSection,
    /// Upstream packages and the version ranges the workaround applies to.
    #[serde(default)]
    pub upstream: BTreeMap<String, String>,
    #[serde(default)]
    pub why: Option<Why>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    pub backend: Backend,
    pub api: String,
    /// Path of the component, relative to the manifest's folder.
    pub component: String,
    /// Stable order within a stage: lower runs first; ties break by name.
    #[serde(default = "default_order")]
    pub order: i32,
    #[serde(default)]
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Why {
    pub upstream_issue: Option<String>,
    pub summary: Option<String>,
}

fn default_order() -> i32 {
    100
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    Patch,
    FxNodeFix,
    FxProgramFix,
    OnnxTranslation,
    OnnxIrFix,
}

impl PluginKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Patch => "patch",
            PluginKind::FxNodeFix => "fx-node-fix",
            PluginKind::FxProgramFix => "fx-program-fix",
            PluginKind::OnnxTranslation => "onnx-translation",
            PluginKind::OnnxIrFix => "onnx-ir-fix",
        }
    }

    /// Kinds dispatched per target need at least one.
    fn needs_targets(self) -> bool {
        self != PluginKind::FxProgramFix
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Backend {
    #[serde(rename = "dynamo")]
    Dynamo,
    #[serde(rename = "onnx")]
    Onnx,
    #[serde(rename = "executorch")]
    Executorch,
    #[serde(rename = "executorch.xnnpack")]
    ExecutorchXnnpack,
    #[serde(rename = "executorch.cuda")]
    ExecutorchCuda,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Dynamo => "dynamo",
            Backend::Onnx => "onnx",
            Backend::Executorch => "executorch",
            Backend::ExecutorchXnnpack => "executorch.xnnpack",
            Backend::ExecutorchCuda => "executorch.cuda",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Manifest {
    /// Parses and validates; the error is one line without the file name.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| one_line_toml_error(text, &e))?;
        manifest.validate()?;
        Ok(manifest)
    }

    fn validate(&self) -> Result<(), String> {
        let p = &self.plugin;
        let name_ok = !p.name.is_empty()
            && p.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !p.name.starts_with('-');
        if !name_ok {
            return Err(format!("plugin.name `{}`: use lowercase letters, digits and `-`", p.name));
        }
        semver::Version::parse(&p.version).map_err(|e| format!("plugin.version `{}`: {e}", p.version))?;
        if !SUPPORTED_APIS.contains(&p.api.as_str()) {
            return Err(format!(
                "plugin.api `{}` is not supported by this hfx (supported: {})",
                p.api,
                SUPPORTED_APIS.join(", ")
            ));
        }
        validate_component_path(&p.component)?;
        if p.kind.needs_targets() && p.targets.is_empty() {
            return Err(format!("plugin.targets is empty: a {} plugin is dispatched by target", p.kind));
        }
        if let Some(t) = p.targets.iter().find(|t| t.trim().is_empty() || t.trim() != t.as_str()) {
            return Err(format!("plugin.targets has a blank or padded entry `{t}`"));
        }
        for (package, range) in &self.upstream {
            semver::VersionReq::parse(range).map_err(|e| format!("upstream.{package} `{range}`: {e}"))?;
        }
        Ok(())
    }
}

/// The component must be a plain relative path inside the plugin's folder.
/// (cap-std enforces the same at open time, symlinks included; this check only
/// gives the clearer message.)
fn validate_component_path(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if path.is_empty() || p.is_absolute() || path.starts_with('/') || path.contains('\\') {
        return Err(format!("plugin.component `{path}` must be a relative path inside the plugin folder"));
    }
    if p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Err(format!("plugin.component `{path}` must not leave the plugin folder"));
    }
    Ok(())
}

/// toml's errors span several lines with a source excerpt: keep the message and the line.
fn one_line_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[plugin]
name = "onnx-fix-alias"
version = "1.0.0"
kind = "fx-node-fix"
backend = "onnx"
api = "0.1"
component = "fix.wasm"
targets = ["aten.alias.default"]
[upstream]
torch = ">=2.12, <2.16"
[why]
upstream-issue = "https://example.invalid/1"
"#;

    #[test]
    fn parses_a_full_manifest() {
        let m = Manifest::parse(GOOD).unwrap();
        assert_eq!(m.plugin.kind, PluginKind::FxNodeFix);
        assert_eq!(m.plugin.order, 100);
        assert_eq!(m.upstream["torch"], ">=2.12, <2.16");
    }

    #[test]
    fn rejects_unknown_fields_with_the_line() {
        let text = GOOD.replace("api = \"0.1\"", "api = \"0.1\"\ncolour = \"red\"");
        let e = Manifest::parse(&text).unwrap_err();
        assert!(e.contains("unknown field `colour`") && e.starts_with("line 8:"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn rejects_paths_outside_the_folder() {
        for path in ["../x.wasm", "/etc/x.wasm", "a/../../x.wasm", "./x.wasm"] {
            let e = Manifest::parse(&GOOD.replace("fix.wasm", path)).unwrap_err();
            assert!(e.contains("plugin.component"), "{path}: {e}");
        }
    }

    #[test]
    fn rejects_wrong_api_kind_and_ranges() {
        assert!(Manifest::parse(&GOOD.replace("\"0.1\"", "\"9.0\"")).unwrap_err().contains("not supported"));
        assert!(Manifest::parse(&GOOD.replace("fx-node-fix", "node-fix")).unwrap_err().contains("unknown variant"));
        assert!(Manifest::parse(&GOOD.replace(">=2.12, <2.16", "two-ish")).unwrap_err().contains("upstream.torch"));
        assert!(Manifest::parse(&GOOD.replace("[\"aten.alias.default\"]", "[]")).unwrap_err().contains("targets"));
    }
}
