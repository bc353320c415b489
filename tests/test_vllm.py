"""The vLLM path on a machine without vLLM: the decision (helpers.compute.vllm_check), the notebooks' use of it,
the profiles' vLLM sizing, and the project's own vLLM generation (helpers.rollouts) against a fake engine
that returns what TRL 1.16's VLLMGeneration.generate returns."""

import ast
import importlib.metadata
import json
import re
import warnings
from types import SimpleNamespace

import pytest
import torch
import trl
from trl import import_utils as trl_import_utils
from packaging.version import Version

from helpers.compute import vllm_check
from tools.notebooks import REPO_ROOT
from helpers.profiles import resolve_settings
from helpers.rollouts import generate_rollout_completions
from helpers.compute.vllm_check import VLLM_INSTALL, VllmUnavailable, decide_use_vllm, trl_vllm_range, vllm_problems


def _trl_warns_about(version: str, monkeypatch) -> bool:
    """Does trl's own check (is_vllm_available) reject this vLLM version?"""
    monkeypatch.setattr(trl_import_utils, "_is_package_available", lambda name, return_version=False: (True, version))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trl_import_utils.is_vllm_available()
    return any("supports vLLM versions" in str(w.message) for w in caught)


@pytest.mark.parametrize("version", ["0.21.0", "0.22.0", "0.24.0+cu129", "0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_accepted_vllm_versions_are_trls_own(version, monkeypatch):
    monkeypatch.setattr(vllm_check, "_installed_vllm", lambda: version)
    rejected_here = any("accepts vllm" in p for p in vllm_problems(cuda=True))
    assert rejected_here == _trl_warns_about(version, monkeypatch)


def test_the_install_recipe_names_a_vllm_trl_accepts():
    pinned = re.search(r'"vllm==([\d.]+)"', VLLM_INSTALL).group(1)
    assert Version(pinned) in trl_vllm_range()
    assert "pip install vllm" not in VLLM_INSTALL  # unpinned: pip picks the newest, outside trl's range


def test_profile_wanting_vllm_without_it_prints_why_and_falls_back(monkeypatch, capsys):
    monkeypatch.setattr(vllm_check, "_installed_vllm", lambda: None)
    assert decide_use_vllm(True, cuda=True) is False
    out = capsys.readouterr().out
    assert "vllm package is not installed" in out and "use_vllm=False" in out and VLLM_INSTALL in out
    with pytest.raises(VllmUnavailable, match="USE_VLLM=True, but there is no CUDA GPU and the vllm package"):
        decide_use_vllm(True, explicit=True, cuda=False)
    monkeypatch.setattr(vllm_check, "_installed_vllm", lambda: "0.30.0")
    assert decide_use_vllm(True, cuda=True) is True
    assert decide_use_vllm(False, explicit=True, cuda=True) is False


def _vllm_statements(notebook: str) -> str:
    """The statements of the notebook's set-up cell that decide use_vllm (model loading left out)."""
    nb = json.loads((REPO_ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    source = next("".join(c["source"]) for c in nb["cells"]
                  if c["cell_type"] == "code" and "settings.use_vllm =" in "".join(c["source"]))
    keep = [ast.get_source_segment(source, s) for s in ast.parse(source).body
            if isinstance(s, (ast.Import, ast.ImportFrom)) or (re.search(r"vllm|on_gpu =", ast.get_source_segment(source, s))
                                                                and "model_path" not in ast.get_source_segment(source, s))]
    return "\n".join(keep)


@pytest.mark.parametrize("notebook", ["03_wordle_rollout_func"])
def test_gpu_profile_of_the_notebook_continues_without_vllm(notebook, monkeypatch, capsys):
    """The notebook's own decision code, on a 'GPU' machine where vLLM is not installed (this one)."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    settings = resolve_settings(notebook, "gpu", quiet=True, gpu=None)   # no real card to plan for
    assert settings.use_vllm
    namespace = {"settings": settings, "VLLM_SERVER_URL": None, "PUSH_TO_HUB": False, "HUB_MODEL_ID": None,
                 "TRACKIO_SPACE_ID": None}
    exec(_vllm_statements(notebook), namespace)
    assert settings.use_vllm is False
    assert "vllm package is not installed" in capsys.readouterr().out
    asked = resolve_settings(notebook, "gpu", quiet=True, gpu=None, use_vllm=True)   # USE_VLLM = True, set by you
    with pytest.raises(VllmUnavailable):
        exec(_vllm_statements(notebook), {**namespace, "settings": asked})


@pytest.mark.parametrize("notebook", ["03_wordle_rollout_func"])
def test_profiles_size_vllm_with_fields_grpo_config_has(notebook):
    settings = resolve_settings(notebook, "gpu", quiet=True)
    config = trl.GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, use_vllm=True, vllm_mode="colocate",
                            vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
                            vllm_max_model_length=settings.vllm_max_model_length)
    assert 0 < config.vllm_gpu_memory_utilization < 0.5  # colocate: training shares the GPU
    assert config.vllm_max_model_length >= settings.max_completion_length
    nb = (REPO_ROOT / "notebooks" / f"{notebook}.ipynb").read_text()
    assert "vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization" in nb


class FakeVLLMGeneration:
    """What trl.generation.vllm_generation.VLLMGeneration.generate returns: (prompt_ids, completion_ids,
    logprobs, logprob_token_ids), logprobs of shape (batch, completion_len, num_logprobs) sorted by rank."""

    def __init__(self, top_n: int = 0):
        self.max_completion_length = 16
        self.top_n = top_n
        self.calls = []

    def generate(self, prompts, images, num_generations, profiler=None):
        self.calls.append({"prompts": prompts, "images": images, "n": num_generations,
                           "max_completion_length": self.max_completion_length})
        completions = [[100 + len(p), 7, 2][: self.max_completion_length] for p in prompts]
        logprobs, token_ids = [], []
        for seq in completions:
            # sampled token with logprob -0.5; with top_n > 0 a more likely token (-0.1) ranks first
            if self.top_n:
                logprobs.append([[-0.1, -0.5] for _ in seq])
                token_ids.append([[999, t] for t in seq])
            else:
                logprobs.append([[-0.5] for _ in seq])
                token_ids.append([[t] for t in seq])
        return prompts, completions, logprobs, token_ids


class _Tokenizer:
    eos_token_id = 2

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


@pytest.mark.parametrize("top_n", [0, 2])
def test_rollout_generation_uses_the_trainers_vllm_and_its_sampled_token_logprobs(top_n):
    engine = FakeVLLMGeneration(top_n)
    trainer = SimpleNamespace(args=SimpleNamespace(use_vllm=True), processing_class=_Tokenizer(),
                              vllm_generation=engine)
    out = generate_rollout_completions(trainer, [[1, 2, 3], [4, 5]], max_new_tokens=2)
    assert engine.calls == [{"prompts": [[1, 2, 3], [4, 5]], "images": None, "n": 1, "max_completion_length": 2}]
    assert engine.max_completion_length == 16  # restored for the trainer's own generation
    assert [o["completion_ids"] for o in out] == [[103, 7], [102, 7]]
    assert [o["logprobs"] for o in out] == [[-0.5, -0.5], [-0.5, -0.5]]
    assert out[0]["prompt_ids"] == [1, 2, 3] and out[1]["text"] == "102 7"
