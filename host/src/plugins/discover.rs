//! Finding plugins on disk. Every file access goes through cap-std: a plugin
//! folder is a capability, and nothing named in a manifest can reach outside
//! it (`..`, absolute paths and symlinks out are refused by construction).

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};

use super::error::LoadError;
use super::manifest::Manifest;

const MANIFEST: &str = "plugin.toml";
/// How deep below a `--plugins` folder manifests are looked for
/// (`plugins/` → `onnx/` → `fix-alias/`).
const MAX_DEPTH: u32 = 3;
/// A component larger than this is refused before it is read.
const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// A plugin found on disk, read but not yet compiled.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub manifest: Manifest,
    /// The plugin's folder, for display.
    pub dir: PathBuf,
    pub manifest_sha256: String,
    pub component: Vec<u8>,
    pub component_sha256: String,
}

impl Discovered {
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join(MANIFEST)
    }

    pub fn component_path(&self) -> PathBuf {
        self.dir.join(&self.manifest.plugin.component)
    }
}

/// Every plugin below `root`, in path order; a plugin that cannot be read is an
/// error entry naming its file, so one bad plugin does not hide the others.
pub fn discover(root: &Path) -> Result<Vec<Result<Discovered, LoadError>>, LoadError> {
    let dir = Dir::open_ambient_dir(root, ambient_authority())
        .map_err(|e| LoadError::new(root, format!("cannot open plugin folder: {e}")))?;
    let mut found = Vec::new();
    walk(&dir, root, MAX_DEPTH, &mut found);
    found.sort_by(|a, b| path_of(a).cmp(path_of(b)));
    Ok(found)
}

fn path_of(entry: &Result<Discovered, LoadError>) -> &Path {
    match entry {
        Ok(d) => &d.dir,
        Err(e) => &e.path,
    }
}

fn walk(dir: &Dir, path: &Path, depth: u32, found: &mut Vec<Result<Discovered, LoadError>>) {
    if dir.is_file(MANIFEST) {
        found.push(read_plugin(dir, path));
        return;
    }
    if depth == 0 {
        return;
    }
    let Ok(entries) = dir.entries() else { return };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && n != "target" && n != "src")
        .collect();
    names.sort();
    for name in names {
        if let Ok(sub) = dir.open_dir(&name) {
            walk(&sub, &path.join(&name), depth - 1, found);
        }
    }
}

/// Reads one plugin folder: its manifest, then the component the manifest names.
pub fn read_plugin(dir: &Dir, path: &Path) -> Result<Discovered, LoadError> {
    let manifest_path = path.join(MANIFEST);
    let text = dir.read_to_string(MANIFEST).map_err(|e| LoadError::new(&manifest_path, e.to_string()))?;
    let manifest = Manifest::parse(&text).map_err(|reason| LoadError::new(&manifest_path, reason))?;
    let component_path = path.join(&manifest.plugin.component);
    let metadata = dir.metadata(&manifest.plugin.component).map_err(|e| component_error(&component_path, &manifest.plugin.component, e))?;
    if metadata.len() > MAX_COMPONENT_BYTES {
        return Err(LoadError::new(&component_path, format!("component is {} bytes, over the {MAX_COMPONENT_BYTES}-byte limit", metadata.len())));
    }
    let component = dir.read(&manifest.plugin.component).map_err(|e| component_error(&component_path, &manifest.plugin.component, e))?;
    Ok(Discovered {
        manifest_sha256: sha256_hex(text.as_bytes()),
        component_sha256: sha256_hex(&component),
        manifest,
        dir: path.to_path_buf(),
        component,
    })
}

fn component_error(path: &Path, name: &str, e: std::io::Error) -> LoadError {
    let reason = match e.kind() {
        std::io::ErrorKind::NotFound => format!("component `{name}` not found (run `cargo xtask build-plugins`?)"),
        // cap-std's answer to a path or symlink that leaves the folder.
        std::io::ErrorKind::PermissionDenied => format!("component `{name}` resolves outside the plugin folder"),
        _ if e.to_string().contains("outside of the filesystem") => {
            format!("component `{name}` resolves outside the plugin folder")
        }
        _ => format!("cannot read component `{name}`: {e}"),
    };
    LoadError::new(path, reason)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
