//! The worker's isolation: its Python ignores the folder hfx runs in, and
//! its OS sandbox (`trace::confine`) holds against code the policy missed.
//! A `--model-fn` model function is trusted code that runs outside the patch
//! policy, so it stands in for "a program the policy missed": what it tries
//! is what hostile code inside the worker could.

use std::path::Path;

use crate::common::*;

/// A module that records that it ran, at `marker`, under a standard library module's name.
fn planted(dir: &Path, name: &str, marker: &Path) {
    let code = format!(
        "open({:?}, 'a').write('{name} ran\\n')\nraise ImportError('planted')\n",
        marker.to_str().unwrap()
    );
    std::fs::write(dir.join(format!("{name}.py")), code).unwrap();
}

#[test]
fn modules_in_the_current_folder_do_not_run_in_the_worker_or_the_version_probe() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("planted-ran");
    // `json`: the worker's server imports it; `email`, `csv`, `zipfile`: `importlib.metadata` does (the probe).
    for name in ["json", "email", "csv", "zipfile"] {
        planted(dir.path(), name, &marker);
    }
    // `hfx doctor` probes the versions; a run starts a worker (its model function does not exist: it fails after `hello`).
    let doctor = hfx_with_python(dir.path(), &["doctor"]);
    assert!(
        !marker.exists(),
        "a planted module ran for `hfx doctor`: {}",
        std::fs::read_to_string(&marker).unwrap()
    );
    assert!(
        String::from_utf8_lossy(&doctor.stdout).contains("torch"),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    // The folder on PYTHONPATH too: its entries come after the standard library.
    let out = dir.path().join("m.pt2");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args([
            "run",
            "--backend",
            "dynamo",
            "--model-fn",
            "python:hfx_test_models:no_such_function",
            "-o",
            out.to_str().unwrap(),
        ])
        .args(["--python", python().to_str().unwrap()])
        .current_dir(dir.path())
        .env(
            "PYTHONPATH",
            std::env::join_paths([root().join("tests/python"), dir.path().to_path_buf()]).unwrap(),
        )
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "a planted module ran in the worker: {}",
        std::fs::read_to_string(&marker).unwrap()
    );
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("no_such_function"),
        "the worker started and reached the model function: {stderr}"
    );
}

/// What the hostile model function tries; it raises naming every attempt
/// that worked (the run fails with that line), else returns a tiny model.
const HOSTILE: &str = r#"
import os, socket, subprocess, sys
import torch

def attempts(outside, secret, home, beside, inherited):
    escaped = []
    def attempt(what, action):
        try:
            action()
        except OSError as error:
            print(f"sandbox held: {what}: {error}", file=sys.stderr)
        else:
            escaped.append(what)
    attempt("write outside", lambda: open(os.path.join(outside, "escaped"), "w").write("x"))
    attempt("write in $HOME", lambda: open(home, "w").write("x"))
    attempt("write beside the output (its folder, not the run's staging)", lambda: open(beside, "a").write("x"))
    attempt("read a descriptor hfx was handed", lambda: os.pread(inherited, 64, 0))
    import stat, tempfile
    attempt("make a device node where it may write", lambda: os.mknod(os.path.join(tempfile.gettempdir(), "disk"), stat.S_IFCHR | 0o600, os.makedev(1, 3)))
    attempt("chroot (a capability of root)", lambda: os.chroot(tempfile.gettempdir()))
    attempt("read a secret", lambda: open(secret).read())
    attempt("list a private folder", lambda: os.listdir(outside))
    attempt("AF_INET socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    attempt("AF_INET6 socket", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
    attempt("subprocess", lambda: subprocess.run(["true"], check=True))
    def execv():
        pid = os.fork()
        if pid == 0:
            try:
                os.execv("/bin/true", ["true"])
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 3:
            raise PermissionError("execv refused in the child")
    attempt("execv", execv)
    return escaped

class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2

def model():
    escaped = attempts(os.environ["HOSTILE_OUTSIDE"], os.environ["HOSTILE_SECRET"], os.environ["HOSTILE_HOME"],
                       os.environ["HOSTILE_BESIDE"], int(os.environ["HOSTILE_FD"]))
    if escaped:
        raise RuntimeError("escaped the sandbox: " + ", ".join(escaped))
    # The scratch folder is the worker's own.
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"allowed")
    return Doubler(), {"x": torch.randn(2, 3)}
"#;

#[test]
fn hostile_code_in_the_worker_cannot_write_read_connect_or_start_programs() {
    let modules = tempfile::tempdir().unwrap();
    std::fs::write(modules.path().join("hfx_hostile_model.py"), HOSTILE).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "the victim's secret").unwrap();
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap())
        .join(format!(".hfx-confine-escape-{}", std::process::id()));
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("model.pt2");
    let pythonpath =
        std::env::join_paths([root().join("tests/python"), modules.path().to_path_buf()]).unwrap();
    // A file of the output's folder (a home folder's `.bashrc`), and a descriptor of
    // the secret hfx inherits without close-on-exec (`9<secret` in a shell).
    let beside = work.path().join(".bashrc");
    std::fs::write(&beside, "the user's start-up file").unwrap();
    let inherited = std::fs::File::open(&secret).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&inherited);
    // SAFETY: clears close-on-exec on a descriptor this test owns, as a shell's redirection leaves it.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    let result = std::process::Command::new(env!("CARGO_BIN_EXE_hfx"))
        .args([
            "run",
            "--backend",
            "dynamo",
            "--model-fn",
            "python:hfx_hostile_model:model",
            "-o",
            out.to_str().unwrap(),
        ])
        .args(["--python", python().to_str().unwrap()])
        .current_dir(work.path())
        .env("PYTHONPATH", pythonpath)
        .env("HFX_CACHE_DIR", root().join("target/hfx-test-cache"))
        .env("HOSTILE_OUTSIDE", outside.path())
        .env("HOSTILE_SECRET", &secret)
        .env("HOSTILE_HOME", &home)
        .env("HOSTILE_BESIDE", &beside)
        .env("HOSTILE_FD", fd.to_string())
        .output()
        .unwrap();
    drop(inherited);
    let escaped_home = home.exists();
    let _ = std::fs::remove_file(&home);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stderr}");
    assert!(!outside.path().join("escaped").exists() && !escaped_home, "{stderr}");
    assert_eq!(std::fs::read_to_string(&beside).unwrap(), "the user's start-up file", "{stderr}");
    assert!(out.exists(), "the export itself works in the sandbox");
    assert!(!stderr.contains("part of its OS sandbox off"), "{stderr}");
}

#[test]
fn doctor_says_which_sandbox_protections_this_machine_has() {
    let dir = tempfile::tempdir().unwrap();
    let doctor = hfx_with_python(dir.path(), &["doctor"]);
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("sandbox"))
        .unwrap_or_else(|| panic!("no sandbox line: {stdout}"));
    assert!(
        line.contains("files on (Landlock ABI")
            && line.contains("network on (seccomp)")
            && line.contains("processes on (seccomp)"),
        "{line}"
    );
}
