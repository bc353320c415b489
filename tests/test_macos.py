"""What an arm64 Mac (Apple Silicon) gets, with the platform faked (sys.platform, platform.machine()): each
place that would behave differently there takes a safe path and says what it chose (docs/workshop.md, "macOS and
Apple Silicon", lists what is not measured)."""

from __future__ import annotations

import platform
import sys
import types

import pytest

from helpers.compute import hardware


@pytest.fixture
def mac(monkeypatch):
    # Import what the tests touch while the platform is still the real one: a package that picks its native
    # module by sys.platform (psutil, through transformers) would otherwise load half of it and stay broken.
    import psutil  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import envs.code_feedback_env.server.sandbox  # noqa: F401
    import helpers.compute.precision  # noqa: F401
    import helpers.models  # noqa: F401
    import helpers.reporting.tracking  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401  (lazy: resolves its submodules now)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")


def test_apple_silicon_is_an_arm64_mac_only(monkeypatch, mac):
    assert hardware.apple_silicon()
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")      # an Intel Mac
    assert not hardware.apple_silicon()
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")       # an arm64 Linux box
    assert not hardware.apple_silicon()


def test_an_apple_silicon_cpu_times_both_precisions_and_says_it_is_unmeasured(mac):
    import torch

    from helpers.compute.precision import choose_precision

    model = torch.nn.Linear(2, 2)
    choice = choose_precision(model, "auto", measure=lambda m, p: {"fp32": 1.0, "bf16": 2.0}[p])
    assert choice.precision == "fp32" and choice.device == "cpu"
    assert "Apple Silicon CPU, timed like any CPU" in str(choice) and "not measured here" in choice.reason
    faster_bf16 = choose_precision(model, "auto", measure=lambda m, p: {"fp32": 2.0, "bf16": 1.0}[p])
    assert faster_bf16.precision == "bf16"              # the timing decides, as on any CPU


def test_a_linux_cpu_reason_does_not_mention_a_mac():
    import torch

    from helpers.compute.precision import choose_precision

    choice = choose_precision(torch.nn.Linear(2, 2), "auto", measure=lambda m, p: 1.0 if p == "fp32" else 2.0)
    assert choice.reason.startswith("measured:")


def _on(device_type):
    """A model whose parameters sit on `device_type` (MPS tensors cannot be made off a Mac)."""
    parameter = types.SimpleNamespace(device=types.SimpleNamespace(type=device_type))
    return types.SimpleNamespace(parameters=lambda: iter([parameter]))


def test_a_model_on_mps_keeps_fp32_and_says_mps_is_not_cuda(mac):
    from helpers.compute.precision import PrecisionError, choose_precision

    def never(model, precision):
        raise AssertionError("nothing is timed on MPS")

    choice = choose_precision(_on("mps"), "auto", measure=never)
    assert (choice.precision, choice.device) == ("fp32", "mps")
    assert "MPS is not CUDA" in str(choice) and "not measured" in choice.reason
    assert choose_precision(_on("mps"), "bf16").reason == "as set"      # a user's explicit choice stands
    with pytest.raises(PrecisionError, match="fp16 autocast is for CUDA cards .* on MPS"):
        choose_precision(_on("mps"), "fp16")


def test_the_notebooks_never_put_a_model_on_mps(mac, monkeypatch):
    """load_policy picks CUDA or the CPU (a Mac: the CPU), and the trainers' configs say use_cpu for a CPU model, so
    transformers does not move it to MPS on its own."""
    import inspect

    import torch

    from helpers.models import load_policy
    from helpers.reporting.tracking import trainer_io

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    source = inspect.getsource(load_policy)
    assert '("cuda" if torch.cuda.is_available() else "cpu")' in source and "mps" not in source
    settings = types.SimpleNamespace(profile="cpu", report_to="none", activation_checkpointing=False)
    precision = types.SimpleNamespace(device="cpu", bf16=False, fp16=False)
    assert trainer_io("01_grpo_walkthrough", "trainer", settings, precision)["use_cpu"] is True


def test_threads_line_names_what_is_not_measured_on_a_mac(mac):
    from helpers.compute.threads import describe

    line = describe(True)
    assert "OMP_WAIT_POLICY=" in line and "Apple Silicon: libomp reads the same policy" in line
    assert "efficiency cores" in line and "not measured here" in line


def test_threads_line_on_linux_says_nothing_of_a_mac():
    from helpers.compute.threads import describe

    assert "Apple Silicon" not in describe(True)


def test_the_sandbox_without_proc_refuses_processes_with_the_guard_and_says_why(mac, monkeypatch):
    """macOS has no /proc: counting 0 processes would set RLIMIT_NPROC below what the user already runs (every
    fork fails) while the report claimed '16 more than it runs now'. Now the guard refuses new processes, the report
    says why, and it does not claim the address-space limit holds there."""
    from envs.code_feedback_env.server import sandbox

    assert sandbox._count_my_processes() is None
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 501)           # a Mac user, not root: no cgroup either
    result = sandbox.run_python("import os\ntry:\n    os.fork()\nexcept PermissionError as e:\n    print(e)")
    assert result.status == "ok", result
    assert "creating processes is disabled" in result.stdout
    assert result.isolation["processes"].startswith("audit-hook guard")
    assert "RLIMIT_NPROC not used: no /proc" in result.isolation["processes"]
    assert "macOS: the address-space limit is set but not measured to hold" in result.isolation["resources"]


def test_the_sandbox_on_linux_still_counts_processes():
    from envs.code_feedback_env.server import sandbox

    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    assert isinstance(sandbox._count_my_processes(), int) and sandbox._count_my_processes() >= 1
