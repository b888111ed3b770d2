//! `cargo xtask fuzz --seconds N [TARGET...]`: builds every libFuzzer target
//! of `fuzz/` on the stable toolchain (`RUSTC_BOOTSTRAP=1`, cargo-fuzz's
//! coverage flags, release code with debug assertions and overflow checks: an
//! arithmetic overflow is a crash), then runs each for N seconds, one after
//! the other on one core. Seeds are `fuzz/seeds/<target>/` (committed, from
//! real traces, manifests and locks); what libFuzzer finds goes to
//! `fuzz/corpus/<target>/` and crashers to `fuzz/artifacts/<target>/` (both
//! ignored by git). Prints executions and crashes per target; fails if any
//! target crashed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

pub fn fuzz(args: &[String]) -> Result<()> {
    let mut seconds = 60u64;
    let mut chosen: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = it
                    .next()
                    .context("--seconds needs a number")?
                    .parse()
                    .context("--seconds needs a number")?
            }
            other if other.starts_with('-') => {
                bail!("unknown option {other} (usage: cargo xtask fuzz [--seconds N] [TARGET...])")
            }
            target => chosen.push(target.to_string()),
        }
    }
    let fuzz_dir = super::workspace_root().join("fuzz");
    let all = targets(&fuzz_dir)?;
    if let Some(unknown) = chosen.iter().find(|t| !all.contains(t)) {
        bail!("no fuzz target `{unknown}` (targets: {})", all.join(", "));
    }
    let targets = if chosen.is_empty() { all } else { chosen };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if !Command::new(&cargo).args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success())
    {
        eprintln!("==> installing cargo-fuzz");
        super::run(Command::new(&cargo).args(["install", "cargo-fuzz", "--locked"]))?;
    }
    eprintln!("==> building {} fuzz target(s)", targets.len());
    let mut build = Command::new(&cargo);
    build.current_dir(&fuzz_dir).env("RUSTC_BOOTSTRAP", "1").args([
        "fuzz",
        "build",
        "--release",
        "--debug-assertions",
        "--sanitizer",
        "none",
    ]);
    super::run(&mut build)?;
    let binaries = fuzz_dir.join("target").join(host_triple()?).join("release");
    let mut results = Vec::new();
    for target in &targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        let seeds = fuzz_dir.join("seeds").join(target);
        let artifacts = fuzz_dir.join("artifacts").join(target);
        for dir in [&corpus, &artifacts] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let before = crashers(&artifacts)?;
        eprintln!("==> fuzzing {target} for {seconds} s");
        let started = Instant::now();
        let mut artifact_prefix = artifacts.clone().into_os_string();
        artifact_prefix.push("/");
        let mut artifact_flag = std::ffi::OsString::from("-artifact_prefix=");
        artifact_flag.push(&artifact_prefix);
        let output = Command::new(binaries.join(target))
            .arg(&corpus)
            .args(seeds.is_dir().then_some(&seeds))
            .arg(format!("-max_total_time={seconds}"))
            .arg(artifact_flag)
            .args(["-timeout=20", "-print_final_stats=1"])
            .args(memory_limits(target))
            .output()
            .with_context(|| format!("running the {target} fuzzer"))?;
        let log = String::from_utf8_lossy(&output.stderr);
        std::fs::write(artifacts.join("last-run.log"), log.as_bytes())?;
        let runs = log
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .map(|n| n.trim().to_string());
        let found: Vec<PathBuf> =
            crashers(&artifacts)?.into_iter().filter(|p| !before.contains(p)).collect();
        results.push((
            target.clone(),
            runs.unwrap_or_else(|| "?".into()),
            started.elapsed().as_secs(),
            output.status.success(),
            found,
        ));
    }
    println!("{:<14} {:>12} {:>8}  result", "target", "executions", "seconds");
    let mut failed = false;
    for (target, runs, secs, ok, found) in &results {
        let result = match (ok, found.is_empty()) {
            (true, true) => "no crash".to_string(),
            _ => {
                failed = true;
                let names: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
                format!(
                    "CRASH {}",
                    if names.is_empty() { "(see last-run.log)".into() } else { names.join(", ") }
                )
            }
        };
        println!("{target:<14} {runs:>12} {secs:>8}  {result}");
    }
    if failed {
        bail!("a fuzz target crashed: each crasher must become a regression test and be fixed");
    }
    Ok(())
}

/// libFuzzer's memory limits for `target`: an out-of-memory is a finding.
/// `host_calls` runs the host functions under 1 MiB write and 4 MiB read
/// budgets, so whatever they let a guest make the host hold is small: a
/// host allocation past 256 MiB, or a process past 1 GiB, is a bound missing.
fn memory_limits(target: &str) -> [&'static str; 2] {
    match target {
        "host_calls" => ["-rss_limit_mb=1024", "-malloc_limit_mb=256"],
        _ => ["-rss_limit_mb=4096", "-malloc_limit_mb=4096"],
    }
}

/// The `[[bin]]` names of `fuzz/Cargo.toml`.
fn targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        bin: Vec<Bin>,
    }
    #[derive(serde::Deserialize)]
    struct Bin {
        name: String,
    }
    let path = fuzz_dir.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: Manifest =
        toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    Ok(manifest.bin.into_iter().map(|b| b.name).collect())
}

/// Crash, timeout, leak and out-of-memory inputs libFuzzer left in `dir`.
fn crashers(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if ["crash-", "timeout-", "leak-", "oom-"].iter().any(|p| name.starts_with(p)) {
            found.push(path);
        }
    }
    Ok(found)
}

fn host_triple() -> Result<String> {
    let out = Command::new("rustc").arg("-vV").output().context("running rustc -vV")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .context("rustc -vV names no host")
}
