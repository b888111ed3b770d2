"""The worker's own part of its OS sandbox (the host's is `host/src/trace/confine.rs`).

The host cannot forbid `execve` before it starts the worker (that start is an
`execve` of Python), so the worker forbids it itself, before its first
request, when the host asks (`HFX_WORKER_NO_EXEC=1`): a seccomp filter on
every thread that makes `execve` and `execveat` fail with EPERM. From then on
nothing in the worker (a policy's miss, model code) starts a program:
`subprocess` and `os.exec*` fail, `fork` alone runs nothing new. A filter
cannot be removed, and it is inherited by every thread and child.
"""

import ctypes
import os

NO_EXEC_ENV = "HFX_WORKER_NO_EXEC"

PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
X32_SYSCALL_BIT = 0x40000000

# Classic BPF over `struct seccomp_data` (nr: u32 at 0, arch: u32 at 4).
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_RET_K = 0x06

# machine → (AUDIT_ARCH_*, seccomp's number, execve's, execveat's)
ARCHES = {
    "x86_64": (0xC000003E, 317, 59, 322),
    "aarch64": (0xC00000B7, 277, 221, 281),
}


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def exec_filter(arch, execve, execveat):
    """`execve` / `execveat` → EPERM; another architecture's (or x32's) calls → EPERM; the rest allowed."""
    deny = SECCOMP_RET_ERRNO | EPERM
    return [
        (BPF_LD_W_ABS, 0, 0, 4),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, deny),
        (BPF_LD_W_ABS, 0, 0, 0),
        (BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
        (BPF_RET_K, 0, 0, deny),
        (BPF_JEQ_K, 1, 0, execve),
        (BPF_JEQ_K, 0, 1, execveat),
        (BPF_RET_K, 0, 0, deny),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]


def refuse_exec():
    """Installs the filter on every thread of the worker; OSError when it cannot."""
    machine = os.uname().machine
    if machine not in ARCHES:
        raise OSError(f"no seccomp filter for {machine} (only {', '.join(ARCHES)})")
    arch, seccomp, execve, execveat = ARCHES[machine]
    statements = exec_filter(arch, execve, execveat)
    table = (SockFilter * len(statements))(*(SockFilter(*s) for s in statements))
    program = SockFprog(len(statements), table)
    libc = ctypes.CDLL(None, use_errno=True)
    if (
        libc.prctl(
            ctypes.c_int(PR_SET_NO_NEW_PRIVS),
            ctypes.c_ulong(1),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
        != 0
    ):
        raise OSError(
            ctypes.get_errno(), f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
        )
    result = libc.syscall(
        ctypes.c_long(seccomp),
        ctypes.c_ulong(SECCOMP_SET_MODE_FILTER),
        ctypes.c_ulong(SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(program),
    )
    if result != 0:
        # TSYNC's failure names a thread that could not take the filter.
        errno = ctypes.get_errno()
        why = os.strerror(errno) if result < 0 else f"thread {result} could not take it"
        raise OSError(errno, f"seccomp(SECCOMP_SET_MODE_FILTER): {why}")


def from_environment():
    """Applies what the host asked for in the worker's environment; one line and exit when it cannot."""
    if os.environ.get(NO_EXEC_ENV) == "1":
        try:
            refuse_exec()
        except OSError as error:
            raise SystemExit(
                f"hfx worker: cannot refuse new programs as the host asked (seccomp): {error}"
            ) from None
