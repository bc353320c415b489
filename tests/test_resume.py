"""helpers.reporting.resume: what a run keeps on disk so RESUME=True can go on (the notebook test kills a real run)."""

from __future__ import annotations

import json

import pytest

from helpers.chain_sum.evaluation import EvalResult
from helpers.reporting.resume import ResumeError, checkpoint_args, kept, resume_point


def test_a_result_is_measured_once_and_a_resumed_run_reads_it_back(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))
    calls = []

    def evaluate():
        calls.append(1)
        return EvalResult(n=3, format_compliance=1.0, accuracy=2 / 3, format_ci=(0.4, 1.0), accuracy_ci=(0.2, 0.9),
                          samples=[{"question": "1 + 1 =", "score": 1.0}])

    first = kept("nb", "before_eval", evaluate, resume=False, load=EvalResult.from_dict, same={"eval_n": 3})
    again = kept("nb", "before_eval", evaluate, resume=True, load=EvalResult.from_dict, same={"eval_n": 3}, out=lambda *a: None)
    assert calls == [1] and again == first and isinstance(again.accuracy_ci, tuple)
    kept("nb", "before_eval", evaluate, resume=False, load=EvalResult.from_dict, same={"eval_n": 3})
    assert calls == [1, 1]  # a new run (RESUME=False) measures again
    with pytest.raises(ResumeError, match=r"eval_n: 3 then, 450 now.*RESUME=False"):
        kept("nb", "before_eval", evaluate, resume=True, load=EvalResult.from_dict, same={"eval_n": 450})


def test_resume_point_is_the_last_checkpoint_or_none_with_the_reason(tmp_path):
    lines = []
    assert resume_point(tmp_path, False) is None
    assert resume_point(tmp_path / "missing", True, out=lines.append) is None and "no checkpoint" in lines[-1]
    for step in (2, 10, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    assert resume_point(tmp_path, True, out=lines.append) == str(tmp_path / "checkpoint-10")
    assert lines[-1].endswith("(step 10)")
    assert checkpoint_args(0) == {"save_strategy": "no"} and checkpoint_args(None) == {"save_strategy": "no"}
    assert checkpoint_args(25) == {"save_strategy": "steps", "save_steps": 25, "save_total_limit": 1}


def test_the_runs_folder_is_the_checkouts_whatever_the_working_directory(tmp_path, monkeypatch):
    """`make demo` (at the top) wrote runs/ there while `jupyter lab notebooks/` looked in notebooks/runs/, so
    notebook 01 did not find notebook 02's checkpoint. Now both mean the checkout's runs/."""
    from helpers.runs import CHECKOUT, runs_dir, use_runs_dir

    monkeypatch.setenv("AGENT_RL_RUNS", "")   # unset, and put back after the test (use_runs_dir sets it)
    monkeypatch.chdir(CHECKOUT / "notebooks")
    assert runs_dir() == CHECKOUT / "runs"
    monkeypatch.chdir(tmp_path)
    assert runs_dir() == CHECKOUT / "runs"
    assert use_runs_dir(tmp_path / "elsewhere") == tmp_path / "elsewhere" and runs_dir() == tmp_path / "elsewhere"
    with pytest.raises(ValueError, match="only Colab can mount"):
        use_runs_dir("/content/drive/MyDrive/agent-rl-runs")
