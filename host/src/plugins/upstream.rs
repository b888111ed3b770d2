//! Upstream versions (torch, transformers, onnx, onnxruntime, executorch, ...)
//! and whether a plugin's `[upstream]` ranges hold for them.
//!
//! Python packages use PEP 440 versions (`2.13.0+cpu`, `2.16.0a0`,
//! `1.32.0.dev20250101`); ranges in manifests are semver requirements
//! (`">=2.12, <2.16"`). A version is compared by its release part, padded to
//! three numbers: a pre-release or dev build counts as its release (`2.16.0a0`
//! is `2.16.0`), local labels (`+cpu`) are ignored.

use std::collections::BTreeMap;
use std::process::Command;

use semver::{Version, VersionReq};

/// Packages whose versions hfx asks the Python environment for.
pub const KNOWN_PACKAGES: &[&str] =
    &["torch", "transformers", "onnx", "onnxscript", "onnxruntime", "executorch", "openvino"];

/// Package name → version as reported (`2.13.0+cpu`).
pub type Versions = BTreeMap<String, String>;

/// The release part of a PEP 440 (or semver) version, as semver.
pub fn release(version: &str) -> Option<Version> {
    let version = version.trim().trim_start_matches('v');
    let version = version.split('+').next()?;
    let mut parts = Vec::new();
    for piece in version.split('.') {
        let digits: String = piece.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() {
            break;
        }
        parts.push(digits.parse::<u64>().ok()?);
        if digits.len() != piece.len() {
            break; // `0a0`, `0rc1`, `0-beta`: the release ends here
        }
    }
    if parts.is_empty() {
        return None;
    }
    parts.resize(3, 0);
    Some(Version::new(parts[0], parts[1], parts[2]))
}

/// Why a plugin's `[upstream]` ranges do not hold, or None when they all do.
pub fn unmet(ranges: &BTreeMap<String, String>, versions: &Versions) -> Option<String> {
    for (package, range) in ranges {
        let Ok(req) = VersionReq::parse(range) else {
            return Some(format!("invalid range `{range}` for {package}"));
        };
        match versions.get(package) {
            None => {
                return Some(format!(
                    "{package} version unknown (not installed; pass --target {package}=VERSION)"
                ))
            }
            Some(found) => match release(found) {
                None => return Some(format!("{package} version `{found}` is not a version")),
                Some(v) if !req.matches(&v) => {
                    return Some(format!("{package} {found} is outside {range}"))
                }
                Some(_) => {}
            },
        }
    }
    None
}

/// Versions installed in the Python environment `python` runs (the trace
/// worker's, once it exists); packages not installed are left out. Python
/// runs isolated (`-I`): a module in the current folder (`email.py`, which
/// `importlib.metadata` imports) does not run.
pub fn probe_installed(python: &str) -> Result<Versions, String> {
    let script = format!(
        "import importlib.metadata as m\nfor p in {:?}:\n    try: print(p, m.version(p))\n    except m.PackageNotFoundError: pass\n",
        KNOWN_PACKAGES
    );
    let out = Command::new(python)
        .args(["-I", "-c"])
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        // One line: the last line of a traceback says what went wrong.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no error output");
        return Err(format!("{python} failed ({}): {last}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(p, v)| (p.to_string(), v.trim().to_string()))
        .collect())
}

/// Parses `--target name=version`.
pub fn parse_target(s: &str) -> Result<(String, String), String> {
    let (name, version) =
        s.split_once('=').ok_or_else(|| format!("`{s}`: expected PACKAGE=VERSION"))?;
    if release(version).is_none() {
        return Err(format!("`{s}`: `{version}` is not a version"));
    }
    Ok((name.trim().to_string(), version.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pep440_versions_compare_by_release() {
        assert_eq!(release("2.13.0+cpu"), Some(Version::new(2, 13, 0)));
        assert_eq!(release("2.16.0a0"), Some(Version::new(2, 16, 0)));
        assert_eq!(release("1.32.0.dev20250101"), Some(Version::new(1, 32, 0)));
        assert_eq!(release("5.24"), Some(Version::new(5, 24, 0)));
        assert_eq!(release("banana"), None);
    }

    #[test]
    fn ranges_hold_or_say_why_not() {
        let ranges: BTreeMap<String, String> =
            [("torch".to_string(), ">=2.12, <2.16".to_string())].into();
        let at = |v: &str| -> Versions { [("torch".to_string(), v.to_string())].into() };
        assert_eq!(unmet(&ranges, &at("2.13.0+cpu")), None);
        assert_eq!(unmet(&ranges, &at("2.16.0")).unwrap(), "torch 2.16.0 is outside >=2.12, <2.16");
        assert!(unmet(&ranges, &Versions::new()).unwrap().contains("--target torch="));
    }
}
