//! `hfx setup` (the worker's Python environment of an installed hfx, created
//! or repaired) and `hfx doctor` (what hfx would use, and what does not fit).

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::installed::Installed;
use crate::plugins::loading::SetOptions;
use crate::plugins::upstream::{self, Versions};

/// The worker's pinned requirements, as `cargo xtask setup-python` installs
/// them into a checkout's `.venv`: the first file with dependencies, the
/// second without (a requirements file cannot mark one package `--no-deps`).
const REQUIREMENTS: &str = include_str!("../../worker/requirements.txt");
const REQUIREMENTS_NO_DEPS: &str = include_str!("../../worker/requirements-no-deps.txt");

/// The pinned `package==version` lines of both files.
pub fn pinned() -> Vec<(String, String)> {
    [REQUIREMENTS, REQUIREMENTS_NO_DEPS]
        .iter()
        .flat_map(|file| file.lines())
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter_map(|line| line.split_once("=="))
        .map(|(package, version)| (package.trim().to_lowercase(), version.trim().to_string()))
        .collect()
}

/// `hfx setup`: creates the installed environment with `python3` if it is
/// missing, installs the pinned requirements into it (pip keeps what already
/// fits), and reports the versions it then has.
pub fn setup(base_python: &str) -> Result<()> {
    let Some(installed) = Installed::find() else {
        bail!("hfx is not installed (no share/hfx beside the binary): install it with `cargo xtask install`, or in a checkout run `cargo xtask setup-python`");
    };
    let venv = installed.venv();
    let python = installed.python();
    if !python.exists() {
        eprintln!("==> creating {}", venv.display());
        run(Command::new(base_python).args(["-m", "venv"]).arg(&venv)).with_context(|| {
            format!("creating {} with {base_python} (give another with --python)", venv.display())
        })?;
    }
    let scratch = tempfile::tempdir().context("a temporary folder for the requirements")?;
    let files = [
        (
            "requirements.txt",
            REQUIREMENTS,
            &[][..],
            " (torch's Linux wheel pulls ~4 GB of CUDA libraries the first time)",
        ),
        ("requirements-no-deps.txt", REQUIREMENTS_NO_DEPS, &["--no-deps"][..], ""),
    ];
    for (name, text, flags, note) in files {
        let file = scratch.path().join(name);
        std::fs::write(&file, text)?;
        eprintln!(
            "==> pip install {}{name}{note}",
            flags.iter().map(|f| format!("{f} ")).collect::<String>()
        );
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-cache-dir",
            ])
            .args(flags)
            .arg("-r")
            .arg(&file))
        .with_context(|| format!("installing {name} into {}", venv.display()))?;
    }
    let found = upstream::probe_installed(&python.to_string_lossy()).map_err(anyhow::Error::msg)?;
    println!("worker environment {}:", venv.display());
    for (package, version) in &found {
        println!("  {package:<12} {version}");
    }
    let problems = mismatches(&found);
    if !problems.is_empty() {
        bail!("the environment does not fit after setup: {}", problems.join("; "));
    }
    Ok(())
}

/// `hfx doctor`: the binary, its install, the Python it would run and that
/// Python's packages against the pins, the default plugin sets and the
/// component cache; then each thing that does not fit, with its fix. Fails
/// when something does not fit.
pub fn doctor(set: &SetOptions) -> Result<()> {
    let mut problems = Vec::new();
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    println!("hfx {} ({exe})", env!("CARGO_PKG_VERSION"));
    let installed = Installed::find();
    match &installed {
        Some(i) => println!("installed     {}", i.share().display()),
        None => {
            println!("installed     no (a build outside an install: plugins only from --plugins)")
        }
    }
    let python = set.python();
    println!("python        {python}");
    match upstream::probe_installed(&python) {
        Ok(found) => {
            for (package, want) in pinned() {
                let have = found.get(&package).map(String::as_str).unwrap_or("missing");
                if upstream::KNOWN_PACKAGES.contains(&package.as_str()) {
                    println!("  {package:<12} {have:<14} (pinned {want})");
                }
            }
            problems.extend(
                mismatches(&found)
                    .into_iter()
                    .map(|p| format!("{p} in {python}: {}", fix(&installed))),
            );
        }
        Err(e) => problems.push(format!("{e}: {}", fix(&installed))),
    }
    println!("sandbox       {}", crate::trace::confine::doctor_line());
    // As a run discovers them: what it would skip is a problem too.
    for folder in &set.folders {
        match crate::plugins::discover::discover_folders(std::slice::from_ref(folder)) {
            Ok((found, warnings)) => {
                println!("plugins       {} ({} plugins)", folder.display(), found.len());
                if found.is_empty() {
                    problems.push(format!("no plugin below {}", folder.display()));
                }
                problems.extend(warnings.iter().map(|w| w.to_string()));
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    if set.folders.is_empty() {
        println!("plugins       none (give --plugins DIR, or install hfx for its default sets)");
    }
    match &set.runtime.cache_dir {
        Some(dir) => {
            let entries = std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
                        .count()
                })
                .unwrap_or(0);
            // Not created here: a cache that does not exist yet is fine.
            let private = if dir.exists() {
                crate::private::trust_dir(dir, "compiled components")
            } else {
                Ok(())
            };
            println!(
                "cache         {} ({entries} compiled components{})",
                dir.display(),
                if private.is_ok() { "" } else { ", not trusted" }
            );
            if let Err(why) = private {
                problems.push(format!(
                    "component cache {}: {why} (components are compiled on every run)",
                    dir.display()
                ));
            }
        }
        None => println!("cache         off"),
    }
    if problems.is_empty() {
        println!("everything fits");
        return Ok(());
    }
    for p in &problems {
        println!("does not fit: {p}");
    }
    bail!("{} thing(s) do not fit (above)", problems.len())
}

/// The command that repairs the worker's environment.
fn fix(installed: &Option<Installed>) -> &'static str {
    match installed {
        Some(_) => "run `hfx setup`",
        None => "run `cargo xtask setup-python` in the hfx checkout, or give a Python with --python / HFX_PYTHON",
    }
}

/// Each pinned package (of those hfx checks) that is missing or at another
/// release than pinned.
fn mismatches(found: &Versions) -> Vec<String> {
    pinned()
        .into_iter()
        .filter(|(package, _)| upstream::KNOWN_PACKAGES.contains(&package.as_str()))
        .filter_map(|(package, want)| match found.get(&package) {
            None => Some(format!("{package} is missing (pinned {want})")),
            Some(have) if upstream::release(have) != upstream::release(&want) => {
                Some(format!("{package} is {have}, pinned {want}"))
            }
            Some(_) => None,
        })
        .collect()
}

fn run(command: &mut Command) -> Result<()> {
    let status =
        command.status().with_context(|| format!("running {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{:?} failed ({status})", command.get_program());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pins_are_read_from_both_requirement_files() {
        let pins = super::pinned();
        for package in ["torch", "transformers", "onnx", "onnxruntime", "executorch", "openvino"] {
            assert!(pins.iter().any(|(p, v)| p == package && !v.is_empty()), "{package}: {pins:?}");
        }
    }
}
