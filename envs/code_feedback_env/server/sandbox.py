"""Run untrusted Python (model output) in a throw-away, limited child process.

It lives in the environment package, so `code_feedback_env` runs (and `openenv push`es) on its own;
notebook 00 imports it from here. The original OpenEnv tutorial's code environment
calls `exec()` on the model's code inside the server: one
`while True: pass` and the server hangs, one `import os; os.system(...)` and it is the model's
machine. Here every submission gets its own short-lived process instead:

    result = run_python("print(1 + 1)")
    result.status, result.stdout, result.elapsed_ms      # 'ok', '2\\n', 31.0

What each run gets, and which mechanism enforces it (`isolation_report()` says which are active on
this machine; `result.isolation` says what was active for that run):

| concern | limit | mechanism (kernel unless noted) |
|---|---|---|
| time | wall clock `wall_timeout_s` | the parent kills the whole process group (and cgroup) |
| CPU | `cpu_time_s` per process | `RLIMIT_CPU` (SIGXCPU) |
| memory | `memory_mb` of address space | `RLIMIT_AS` (MemoryError) |
| processes | `max_processes` | a pids cgroup (root), else `RLIMIT_NPROC` (non-root), else the guard |
| output / files | `max_file_bytes` per file, `max_output_chars` returned | `RLIMIT_FSIZE` (SIGXFSZ), truncation |
| file system | read: Python's stdlib and system libraries; write: the work dir | Landlock, else the guard |
| network | none | a new network namespace, else Landlock TCP rules, else the guard |
| environment | empty: no inherited variables (no tokens, no keys) | `env=` of the child |
| interpreter | `python -I -S`: isolated mode, standard library only | |

"The guard" is a Python audit hook (`sys.addaudithook`) installed in the child for the layers the
kernel cannot enforce here. It gives clear errors, but it is *not* a security boundary (Python's
docs say so): code that reaches raw memory can get around it. Kernel layers cannot be undone from
inside the process.

What this does NOT protect against: kernel exploits (the child shares the kernel), side channels,
disk filling with many files (only each file's size is capped), and, where a layer falls back to
the guard, a determined attacker. Without a pids cgroup (non-root), a grandchild that leaves the
process group (`os.setsid()`) can outlive its run; it keeps its CPU-time and other limits. In production, run the environment server itself in a
container (Docker with `--network none`, a read-only root, pids/memory limits) or a gVisor /
Firecracker sandbox, and keep this per-submission process on top.

The child half of this module (`python -I -S sandbox.py CONFIG`) uses the standard library only.
"""

from __future__ import annotations

import marshal  # not json: importing json (and re) would double the child's start-up time
import os
import sys

# ---------------------------------------------------------------------------------------------
# Shared by parent and child
# ---------------------------------------------------------------------------------------------

SUBMISSION_FILE = "submission.py"
_PIDS_CGROUP_ROOT = "/sys/fs/cgroup/pids"  # cgroup v1 pids hierarchy
_CGROUP_PARENT = "agent_rl_sandbox"
_CGROUP_PARENT_MAX_PIDS = 1024  # all sandboxes of this machine together, whatever each asks for

# Landlock (Linux >= 5.13): unprivileged, kernel-enforced file system and TCP rules.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ABI1_ALL = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_PR_SET_NO_NEW_PRIVS = 38


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers (0 = none)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes

        version = _libc().syscall(
            _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
            ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
        )
    except Exception:
        return 0
    return max(int(version), 0)


def _python_read_dirs() -> list[str]:
    """Directories the child may read: the stdlib, and the system's shared libraries."""
    import sysconfig

    dirs = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    dirs.update(p for p in ("/usr/lib", "/usr/lib64", "/lib", "/lib64") if os.path.isdir(p))
    return sorted(d for d in dirs if d and os.path.isdir(d))


# ---------------------------------------------------------------------------------------------
# Child side: runs as `python -I -S sandbox.py CONFIG`. It comes before the parent side so the
# child starts fast: it runs and exits below without importing what only the parent needs.
# ---------------------------------------------------------------------------------------------


def _apply_landlock(read_dirs: list[str], workdir: str, block_tcp: bool) -> str | None:
    """Restrict this process (and its children) with Landlock; returns a description or None."""
    import ctypes

    abi = landlock_abi()
    if abi < 1:
        return None
    libc = _libc()

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    fs_all = _FS_ABI1_ALL | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0) | (
        _FS_IOCTL_DEV if abi >= 5 else 0)
    attr = RulesetAttr(fs_all, 0, 0)
    size = 8
    if abi >= 4 and block_tcp:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP  # no rule: all TCP refused
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL  # no signals to the server
        size = 24
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return None
    read_dir = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    rules = [(d, read_dir) for d in read_dirs] + [(workdir, fs_all)]
    rules += [(p, _FS_READ_FILE | _FS_WRITE_FILE) for p in ("/dev/null", "/dev/urandom")]
    rules += [("/etc/ld.so.cache", _FS_READ_FILE)]
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    access &= _FS_EXECUTE | _FS_READ_FILE | _FS_WRITE_FILE | (
                        _FS_TRUNCATE if abi >= 3 else 0)
                rule = PathBeneath(access & fs_all, fd)
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    return None
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return None
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            return None
    finally:
        os.close(ruleset)
    return f"Landlock ABI {abi} (kernel)"


def _new_network_namespace(root: bool) -> str | None:
    """Move this process into an empty network namespace (only a down loopback)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    if root and libc.unshare(_CLONE_NEWNET) == 0:
        return "new network namespace (kernel)"
    if not root and libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        return "new user + network namespace (kernel)"
    return None


def _install_guard(workdir: str, read_dirs: list[str], files: bool, network: bool,
                   processes: bool) -> None:
    """The audit-hook guard for layers no kernel mechanism covers here (not a security boundary)."""
    allowed_read = tuple(os.path.join(d, "") for d in read_dirs)
    work = os.path.join(workdir, "")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    process_events = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system",
                      "os.exec", "subprocess.Popen", "pty.spawn"}

    def guard(event, args):
        if files and event == "open" and args and isinstance(args[0], (str, bytes)):
            path = os.path.realpath(os.fsdecode(args[0]))
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writing = any(c in mode for c in "wax+") or bool(flags & write_flags)
            if path != workdir and not path.startswith(work):
                if writing or not path.startswith(allowed_read):
                    raise PermissionError(f"sandbox: {path} is outside the work directory")
        elif network and event in ("socket.__new__", "socket.connect", "socket.bind",
                                   "socket.getaddrinfo"):
            raise PermissionError("sandbox: network access is disabled")
        elif processes and event in process_events:
            # A per-process counter would not bound a fork bomb (each child gets a fresh copy).
            raise PermissionError("sandbox: creating processes is disabled")
        elif event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata"):
            raise PermissionError("sandbox: ctypes is disabled")

    sys.addaudithook(guard)


def _child_main(config: dict) -> None:
    import resource

    limits = config["limits"]
    workdir = config["workdir"]
    isolation = {}

    # 1. Processes: join the pids cgroup first, so everything after is counted.
    nproc_limit = None
    if config.get("cgroup_procs"):
        try:
            with open(config["cgroup_procs"], "w") as f:
                f.write(str(os.getpid()))
            isolation["processes"] = f"pids cgroup, at most {limits['max_processes']} (kernel)"
        except OSError:
            pass
    if "processes" not in isolation and not config["root"] and config["nproc_base"] is not None:
        nproc_limit = config["nproc_base"] + limits["max_processes"]
        isolation["processes"] = (f"RLIMIT_NPROC {nproc_limit} for this user "
                                  f"({limits['max_processes']} more than it runs now) (kernel)")

    # 2. Network: an empty network namespace where we may create one.
    kernel = config.get("kernel_layers", True)
    net = _new_network_namespace(config["root"]) if kernel else None
    # 3. File system (and TCP, when no namespace): Landlock.
    landlock = _apply_landlock(config["read_dirs"], workdir, block_tcp=net is None) if kernel else None
    if net:
        isolation["network"] = net
    elif landlock and landlock_abi() >= 4:
        isolation["network"] = "Landlock: TCP connect/bind refused (kernel; UDP not covered)"
    if landlock:
        isolation["files"] = f"{landlock}: read stdlib + system libs, write the work dir only"
        if landlock_abi() >= 6:
            isolation["signals"] = "Landlock scope: no signals to processes outside the sandbox"

    # 4. Resource limits (each one that this OS refuses is named in the report).
    mb = 1024 * 1024
    wanted = [("CPU", resource.RLIMIT_CPU, limits["cpu_time_s"], limits["cpu_time_s"] + 1),
              ("AS", resource.RLIMIT_AS, limits["memory_mb"] * mb, limits["memory_mb"] * mb),
              ("FSIZE", resource.RLIMIT_FSIZE, limits["max_file_bytes"], limits["max_file_bytes"]),
              ("NOFILE", resource.RLIMIT_NOFILE, limits["max_open_files"], limits["max_open_files"]),
              ("CORE", resource.RLIMIT_CORE, 0, 0)]
    if nproc_limit is not None:
        wanted.append(("NPROC", resource.RLIMIT_NPROC, nproc_limit, nproc_limit))
    refused = []
    for name, which, soft, hard in wanted:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            refused.append(name)
    if "NPROC" in refused:
        del isolation["processes"]
    isolation["resources"] = (f"setrlimit: CPU {limits['cpu_time_s']} s, address space "
                              f"{limits['memory_mb']} MB, files {limits['max_file_bytes']:,} bytes, "
                              f"{limits['max_open_files']} open files (kernel)")
    if refused:
        isolation["resources"] += f"; NOT enforced here: RLIMIT_{', RLIMIT_'.join(refused)}"
    if config.get("platform", sys.platform) == "darwin":
        isolation["resources"] += "; macOS: the address-space limit is set but not measured to hold there"

    # 5. The guard covers what is left.
    guard_files = "files" not in isolation
    guard_network = "network" not in isolation
    guard_processes = "processes" not in isolation
    if guard_files:
        isolation["files"] = "audit-hook guard: opens outside the work dir refused (not a boundary)"
    if guard_network:
        isolation["network"] = "audit-hook guard: sockets refused (not a boundary)"
    if guard_processes:
        isolation["processes"] = "audit-hook guard: no new processes (not a boundary)"
        if config["nproc_base"] is None and not config["root"]:
            isolation["processes"] += "; RLIMIT_NPROC not used: no /proc to count this user's processes (macOS)"
    isolation["environment"] = "empty environment, python -I -S, temporary work dir"
    os.write(config["report_fd"], marshal.dumps(isolation))  # before any untrusted code runs
    os.close(config["report_fd"])
    result_channel = os.fdopen(config["result_fd"], "w", buffering=1)

    with open(SUBMISSION_FILE, encoding="utf-8") as f:
        source = f.read()
    if guard_files or guard_network or guard_processes:
        _install_guard(workdir, config["read_dirs"], guard_files, guard_network, guard_processes)

    # 6. The submission, as a script named submission.py (tracebacks show only its frames).
    namespace = {"__name__": "__main__", "__file__": SUBMISSION_FILE, "__builtins__": __builtins__}
    try:
        exec(compile(source, SUBMISSION_FILE, "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report anything the code raises
        _print_user_traceback(exc)
        sys.exit(1)
    call = config.get("call")
    if call:
        import json

        func = namespace.get(call["function"])
        if not callable(func):
            print(f"NameError: function {call['function']!r} is not defined by the code",
                  file=sys.stderr)
            sys.exit(1)
        for args in call["calls"]:
            try:
                line = json.dumps({"ok": True, "value": func(*args)})
            except BaseException as exc:  # noqa: BLE001
                line = json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
            result_channel.write(line + "\n")
    sys.stdout.flush()


def _print_user_traceback(exc: BaseException) -> None:
    import traceback

    tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # drop this module's frame
    lines = traceback.format_exception(type(exc), exc, tb)
    sys.stderr.write("".join(lines))


if __name__ == "__main__":  # the sandboxed child
    _child_main(marshal.loads(bytes.fromhex(sys.argv[1])))
    sys.exit(0)

# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------

import json
import select
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Limits:
    """What one submission may use. The defaults suit short "does this function work" checks."""

    wall_timeout_s: float = 5.0
    cpu_time_s: int = 3
    memory_mb: int = 256
    max_processes: int = 16
    max_file_bytes: int = 1 << 20  # per file, stdout/stderr included: 1 MiB
    max_output_chars: int = 4000  # of stdout and of stderr handed back
    max_open_files: int = 64


@dataclass
class SandboxResult:
    """What happened. `status`: ok | error | timeout | memory_limit | output_limit."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    elapsed_ms: float
    limit: str | None = None  # the limit that stopped the run, if one did
    truncated: bool = False
    results: list = field(default_factory=list)  # JSON lines the child wrote to its result channel
    isolation: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class SandboxError(RuntimeError):
    """The sandbox itself could not start a child (not the submission's fault)."""


def _pids_cgroup_available() -> bool:
    return (os.geteuid() == 0 and Path(_PIDS_CGROUP_ROOT, "cgroup.procs").exists()
            and os.access(_PIDS_CGROUP_ROOT, os.W_OK))


def _make_pids_cgroup(max_processes: int) -> Path | None:
    """A fresh pids cgroup capped at `max_processes` (root with cgroup v1 pids only), else None."""
    if not _pids_cgroup_available():
        return None
    try:
        parent = Path(_PIDS_CGROUP_ROOT, _CGROUP_PARENT)
        if not parent.exists():
            parent.mkdir(exist_ok=True)
            (parent / "pids.max").write_text(str(_CGROUP_PARENT_MAX_PIDS))
        group = parent / uuid.uuid4().hex[:12]
        group.mkdir()
        (group / "pids.max").write_text(str(max_processes))
        return group
    except OSError:
        return None


def _kill_cgroup(group: Path) -> None:
    """SIGKILL every process in `group` until it is empty, then remove it."""
    for _ in range(200):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    for _ in range(100):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)  # zombies not yet reaped by their parent


def _count_my_processes() -> int | None:
    """Processes (and threads' owners) of this real uid, for a non-root RLIMIT_NPROC; None where there is no
    /proc to count them (macOS). Counting 0 there would set RLIMIT_NPROC below what the user already runs, every
    fork would fail and the report would claim a limit it does not mean: the guard refuses new processes instead,
    and the report says why."""
    uid = os.getuid()
    count = 0
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        return None
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _read_capped(path: Path, limit: int) -> tuple[str, bool]:
    """The first `limit` characters of a file (decoded leniently), and whether it was longer."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit * 4 + 4)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return "", False
    text = data.decode("utf-8", errors="replace")
    if len(text) > limit or size > len(data):
        return text[:limit] + f"\n[... output truncated: {size:,} bytes in all]", True
    return text, False


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _classify(returncode: int | None, stderr: str, timed_out: bool, stdout_size: int,
              stderr_size: int, limits: Limits) -> tuple[str, str | None]:
    if timed_out:
        return "timeout", f"wall clock ({limits.wall_timeout_s:g} s)"
    if returncode == -signal.SIGXCPU or returncode == 128 + signal.SIGXCPU:
        return "timeout", f"CPU time ({limits.cpu_time_s} s)"
    if returncode == -signal.SIGXFSZ or max(stdout_size, stderr_size) >= limits.max_file_bytes:
        return "output_limit", f"file size ({limits.max_file_bytes:,} bytes)"
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if last_line.startswith("MemoryError"):
        return "memory_limit", f"address space ({limits.memory_mb} MB)"
    if returncode == 0:
        return "ok", None
    return "error", None


def run_python(code: str, limits: Limits | None = None, *, call: dict | None = None,
               kernel_layers: bool = True) -> SandboxResult:
    """Run `code` as a script in a fresh sandboxed Python process and report what happened.

    Args:
        code: Python source (untrusted).
        limits: resource limits (default `Limits()`).
        call: optional {"function": name, "calls": [[args...], ...]}: after the script, the child
            calls `name(*args)` for each entry and writes one JSON line per call
            (`{"ok": true, "value": ...}` or `{"ok": false, "error": "..."}`) to a result
            channel that ends up in `result.results`. Grade those values outside the sandbox:
            the sandboxed code could write anything to that channel, but only correct values
            earn a correct grade.
        kernel_layers: False skips the network namespace and Landlock, to see what the fallback
            (the audit-hook guard) does on machines without them. Limits stay kernel-enforced.
    """
    if os.name != "posix":
        raise SandboxError("The sandbox needs a POSIX system (Linux, macOS); on Windows use WSL.")
    limits = limits or Limits()
    start = time.perf_counter()
    io_dir = Path(tempfile.mkdtemp(prefix="sandbox-io-"))
    workdir = Path(tempfile.mkdtemp(prefix="sandbox-work-"))
    group = _make_pids_cgroup(limits.max_processes)
    (workdir / SUBMISSION_FILE).write_text(code, encoding="utf-8")
    config = {
        "workdir": str(workdir),
        "read_dirs": _python_read_dirs(),
        "limits": asdict(limits),
        "cgroup_procs": str(group / "cgroup.procs") if group else None,
        "root": os.geteuid() == 0,
        "nproc_base": 0 if os.geteuid() == 0 else _count_my_processes(),
        "call": call,
        "kernel_layers": kernel_layers,
        "platform": sys.platform,
    }
    report_r, report_w = os.pipe()
    result_path = io_dir / "results.jsonl"
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "HOME": str(workdir), "TMPDIR": str(workdir)}
    stdout_path, stderr_path = io_dir / "stdout", io_dir / "stderr"
    timed_out = False
    proc = None
    try:
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err, \
             open(result_path, "wb") as res:
            config["report_fd"], config["result_fd"] = report_w, res.fileno()
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", os.path.abspath(__file__), marshal.dumps(config).hex()],
                    cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                    pass_fds=(report_w, res.fileno()), start_new_session=True, close_fds=True,
                )
            except OSError as exc:
                raise SandboxError(f"Could not start the sandbox child: {exc}") from exc
            finally:
                os.close(report_w)
            timed_out = not _wait_exit(proc, limits.wall_timeout_s)
            _kill_all(proc, group)
        with os.fdopen(report_r, "rb") as f:
            report_r = None
            report = f.read(1 << 16)
        try:  # written by the child's own set-up code, before the submission ran
            isolation = marshal.loads(report) if report else {}
        except (ValueError, EOFError, TypeError):
            isolation = {}
        stdout, out_cut = _read_capped(stdout_path, limits.max_output_chars)
        stderr, err_cut = _read_capped(stderr_path, limits.max_output_chars)
        results = _read_results(result_path)
        status, limit = _classify(proc.returncode, stderr, timed_out, _file_size(stdout_path),
                                  _file_size(stderr_path), limits)
        if status == "timeout" and timed_out:
            stderr += f"\n[killed: ran longer than {limits.wall_timeout_s:g} s]"
        elif status == "timeout":
            stderr += f"\n[killed: used more than {limits.cpu_time_s} s of CPU time]"
        elif status == "output_limit":
            stderr += f"\n[stopped: wrote more than {limits.max_file_bytes:,} bytes to one file]"
        return SandboxResult(
            status=status, returncode=None if timed_out else proc.returncode,
            stdout=stdout, stderr=stderr.strip("\n"),
            elapsed_ms=round((time.perf_counter() - start) * 1000, 2),
            limit=limit, truncated=out_cut or err_cut, results=results, isolation=isolation,
        )
    finally:
        if report_r is not None:
            os.close(report_r)
        if proc is not None and proc.poll() is None:
            _kill_all(proc, group)
        elif group is not None:
            _kill_cgroup(group)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(io_dir, ignore_errors=True)


def _wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait until `proc` exits (True) or `timeout` passes (False).

    Uses a pidfd (Linux >= 5.3) so the wait ends the moment the child exits; `Popen.wait(timeout)`
    polls with sleeps of up to 50 ms, which would dominate the cost of a short submission.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if ready:
        proc.wait()
    return bool(ready)


def _kill_all(proc: subprocess.Popen, group: Path | None) -> None:
    """Kill the child, its process group and (when there is one) everything in its cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if group is not None:
        _kill_cgroup(group)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _read_results(path: Path, max_bytes: int = 1 << 20) -> list:
    try:
        with open(path, "rb") as f:
            lines = f.read(max_bytes).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    results = []
    for line in lines:
        try:
            results.append(json.loads(line))
        except ValueError:
            pass
    return results


def isolation_report() -> dict:
    """Which mechanism enforces each layer on this machine (runs one empty submission)."""
    return run_python("pass").isolation
