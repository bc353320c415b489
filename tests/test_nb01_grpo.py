"""Notebook 01 (end-to-end GRPO walkthrough) with PROFILE=tiny: trains, evaluates, records sane metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.reporting.intervals import PairedChange
from helpers.chain_sum.grpo import RewardDelta, diagnose
from tools.notebooks import NOTEBOOKS_DIR, cell_outputs_text, static_problems
from helpers.chain_sum.preflight import verdict
from helpers.profiles import resolve_settings

from eval_checks import assert_before_after_metrics, assert_precision_recorded

NB = "01_grpo_walkthrough"


def test_notebook_passes_the_static_gate():
    assert static_problems(NOTEBOOKS_DIR / f"{NB}.ipynb") == []


def test_the_environment_class_cell_loads_on_its_own_and_its_tool_is_the_shared_one():
    """The "env-class" cell is what the reliability test and the training benchmark run: it loads from the names
    the notebook's earlier cells set, reads `env_url` when an instance is built, and its `answer` tool has the
    schema of helpers.prompts.answer (the tool the SFT data and the evaluation show the model)."""
    from transformers.utils import get_json_schema

    from helpers.prompts import answer
    from tools.notebooks import load_cells

    namespace = {"dataset_name": "chain_sum", "dataset_config": {}, "env_url": "http://127.0.0.1:9",
                 "settings": resolve_settings(NB, "tiny", quiet=True, exact_reward=True)}
    env_class = load_cells(NOTEBOOKS_DIR / f"{NB}.ipynb", "env-class", namespace=namespace)["ReasoningGymTrainEnv"]
    namespace["env_url"] = "http://127.0.0.1:10"   # read at __init__, as the notebook sets it after the cell ran
    env = env_class()
    assert env_class.created == 1 and env_class.EXACT_ONLY is True
    with pytest.raises(ConnectionError, match="127.0.0.1:10"):   # nothing listens there: the error names the URL
        env.reset()
    assert get_json_schema(env.answer) == get_json_schema(answer)
    env.reward = 0.67   # partial credit: EXACT_REWARD pays only the exact answer
    assert env.get_reward() == 0.0


def test_the_config_table_shows_the_resolved_lesson_fields():
    from trl import GRPOConfig

    from helpers.chain_sum.grpo import LESSON_FIELDS, config_table

    config = GRPOConfig(output_dir="unused", max_steps=3, num_generations=4, per_device_train_batch_size=4,
                        use_cpu=True, report_to="none")
    table = config_table(config)
    assert all(f"  {name} " in table for name in LESSON_FIELDS)
    assert "'linear'" in table and "SchedulerType" not in table   # an enum shows its value
    assert table.splitlines()[-1] == "generation batch: 4 rollouts = 1 prompt rows x 4 generations"


def test_tiny_run_records_sane_metrics(notebook_runner, tmp_path):
    metrics, executed = notebook_runner(NB)
    text = cell_outputs_text(executed)   # only for what a learner is promised to see; facts come from metrics.json

    # the trainer ran its steps against the local server, sized from the config
    assert metrics["profile"] == "tiny" and metrics["env_server"] == "local"
    assert metrics["steps"] == 2 == metrics["steps_run"] == metrics["steps_planned"]
    assert metrics["stopped_by_time_budget"] is False and metrics["seconds_per_step"] > 0
    # the estimate after two steps says when the evaluation after training ends, from the one before it
    assert metrics["eval_seconds_before"] > 0 and metrics["eval_seconds_after"] > 0
    assert "then the evaluation after training: about" in text
    assert_precision_recorded(metrics, text)
    assert metrics["env_sessions"] == metrics["generation_batch_size"] + 1
    assert 1 <= metrics["env_pool_size"] <= metrics["generation_batch_size"] < metrics["env_sessions"]
    # every GRPO group's rollouts answered the same question (the dataset row's question_seed)
    assert metrics["same_question_per_group"] is True and metrics["same_question_share"] == 1.0
    # the trainer's config got the profile's sampling and loss knobs (tiny, like cpu, trains on the most uncertain tokens)
    tiny = resolve_settings(NB, "tiny", quiet=True)
    assert metrics["temperature"] == tiny.temperature and metrics["top_entropy_quantile"] == tiny.top_entropy_quantile < 1
    assert f"MAX_CONCURRENT_ENVS={metrics['env_sessions']}" in text and "local reasoning_gym server stopped" in text

    # rewards are environment scores; the reward delta is their first/last average
    curve = metrics["reward_curve"]
    assert len(curve) == 2 and all(0.0 <= r <= 1.0 for r in curve)
    assert metrics["max_steps"] == tiny.max_steps and metrics["num_generations"] == tiny.num_generations
    for key in ("reward_initial", "reward_final"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["reward_delta"] == pytest.approx(metrics["reward_final"] - metrics["reward_initial"])
    assert metrics["tool_call_frequency"] > 0  # tiny-toolcall emits <tool_call> blocks that TRL parsed
    episodes = metrics["env_episodes"]   # through helpers.servers.resilient: every episode scored, none lost
    assert episodes["rollouts"] > 0 and episodes["failed"] == 0 and episodes["scored"] > 0
    # the verdict is the one diagnose() gives for the recorded numbers: the paired held-out change decides
    recorded = RewardDelta(initial=metrics["reward_initial"], final=metrics["reward_final"],
                           delta=metrics["reward_delta"], window=metrics["reward_window"], logged=len(curve))
    change = PairedChange(n=metrics["eval_n"], change=metrics["accuracy_change"],
                          ci=tuple(metrics["accuracy_change_ci"]), gained=metrics["questions_gained"],
                          lost=metrics["questions_lost"])
    assert metrics["diagnosis"] == diagnose(recorded, change=change,
                                            tool_call_frequency=metrics["tool_call_frequency"]).verdict
    assert f"Diagnosis [{metrics['diagnosis']}]" in text
    # the worked GRPO group: num_generations rollouts of one question, scored and turned into advantages
    assert text.count("  rollout ") >= 2 * metrics["num_generations"] and "group mean" in text
    assert "MODEL (trained) ▸" in text
    # one of the policy's own rollouts from the last training step, shown whole (helpers.reporting.show): the environment's
    # get_reward() is the reward (no reward function is passed)
    assert "tool call │ answer(answer=" in text and "env reply │ score=" in text
    # the same rollout token by token under the trainer's chat template, with its checks (the tiny model's calls
    # may be malformed, and then the second check says so; an env segment appears only when a call ran)
    assert "MODEL (trained), " in text and "PROMPT (not trained), " in text
    assert "✓ the chat template is prefix-preserving" in text
    assert "✓ every tool call the model made parses" in text or "✗ every tool call the model made parses" in text
    assert "reward    │ ReasoningGymTrainEnv +" in text
    assert "write_token" not in text and 'trackio show --project "agent-rl-notebooks"' in text  # no dashboard frame

    # the preflight: num_generations rollouts at the training temperature per training question, env-scored
    assert metrics["preflight_n"] == tiny.preflight_n and metrics["preflight_k"] == metrics["num_generations"]
    assert metrics["preflight_temperature"] == metrics["temperature"]
    pf = {key: metrics[f"preflight_{key}"] for key in ("parse_rate", "greedy_accuracy", "sampled_accuracy",
                                                        "sampled_exact", "pass_at_k", "mixed_share")}
    assert all(0.0 <= share <= 1.0 for share in pf.values())
    assert pf["sampled_exact"] <= pf["pass_at_k"] and pf["sampled_accuracy"] <= pf["parse_rate"]
    assert pf["parse_rate"] > 0   # tiny-toolcall's calls parsed and the environment scored them
    assert metrics["preflight_verdict"] == verdict(pf["parse_rate"], pf["mixed_share"], pf["pass_at_k"],
                                                   pf["sampled_accuracy"], metrics["preflight_k"],
                                                   pf["greedy_accuracy"])[0]
    assert metrics["mixed_only"] is False and metrics["mixed_questions"] is None
    # TRL's share of zero-std groups, one per logged step, and its mean
    zero_std = metrics["frac_reward_zero_std_curve"]
    assert len(zero_std) == 2 and all(0.0 <= z <= 1.0 for z in zero_std)
    assert metrics["frac_reward_zero_std"] == pytest.approx(sum(zero_std) / 2)
    # one loss pass a step here (one micro-batch); only a step whose group scored alike can have had it skipped
    assert metrics["loss_passes"] == 2 and 0 <= metrics["loss_passes_skipped"] <= sum(z == 1.0 for z in zero_std)
    assert f"loss passes skipped: {metrics['loss_passes_skipped']} of 2" in text
    # where each step went, read back from trackio's log (benchmarks/step_times.py): a skipped pass ran no loss timer
    from benchmarks.step_times import runs, summary
    steps = runs(tmp_path / "trackio" / "agent-rl-notebooks.db", f"{NB}-trainer-tiny")[-1]
    assert [s["step"] for s in steps] == [1, 2] and all(0 < s["generation"] < s["seconds"] for s in steps)
    assert [s["frac_reward_zero_std"] for s in steps] == zero_std
    assert sum(s["passes"] for s in steps) == metrics["loss_passes"] - metrics["loss_passes_skipped"]
    assert summary(steps)["steps_without_a_pass"] == metrics["loss_passes_skipped"]

    # the run's watch (helpers.reporting.alarms): the probe at the start and after each step, the alarms it raised (each
    # printed while training), the gallery judged by the strict sum; the curves the reference band compares
    watch = metrics["watch"]
    assert [step for step, _ in watch["probe"]] == [0, 1, 2] and all(0 <= v <= 1 for _, v in watch["probe"])
    assert all(f"[watch] ALARM {kind}" in text for kind in watch["alarms"])
    assert all(item["reward"] >= 0.5 and "the answer is" in item["why"] for item in watch["gallery"])
    assert 0.0 <= watch["no_tool_share"] <= 1.0
    assert metrics["curves"]["step"] == [1, 2] and metrics["curves"]["reward"] == curve
    assert "no reference runs stored" in text or "reference runs" in text

    # held-out evaluation before and after, same size, with intervals around the point estimates
    assert metrics["eval_n"] == 8
    assert_before_after_metrics(metrics)
    assert metrics["format_before"] > 0  # the tool-call format survives into the evaluation parser
    # the same change split by kind of sum (section 12): every held-out question in one row, exact answers
    rows = metrics["by_kind"]
    assert sum(row["n"] for row in rows) == metrics["eval_n"] and "kind" in text and rows[0]["kind"] in text
    for when in ("before", "after"):
        assert sum(row[when] * row["n"] for row in rows) / metrics["eval_n"] == pytest.approx(metrics[f"exact_{when}"])

    # plots and the local model copy were written; nothing was pushed
    for plot in metrics["plots"]:
        assert Path(plot).stat().st_size > 1000
    assert (Path(metrics["saved_to"]) / "model.safetensors").exists()
    assert metrics["pushed_to"] is None
    assert metrics["start_checkpoint"].startswith("tiny-toolcall") and metrics["warm_started"] is False
    assert metrics["train_seconds"] > 0 and metrics["wall_seconds"] >= metrics["train_seconds"]


def test_unknown_dataset_fails_before_training(notebook_runner):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError) as err:
        notebook_runner(NB, DATASET_NAME="chain_sums")
    assert "Unknown DATASET_NAME 'chain_sums'" in str(err.value) and "letter_counting" in str(err.value)


def test_unreachable_server_is_named_before_training(notebook_runner):
    import papermill

    with pytest.raises(papermill.PapermillExecutionError) as err:
        notebook_runner(NB, ENV_BASE_URL="http://127.0.0.1:9")
    assert "http://127.0.0.1:9" in str(err.value) and "No server answers" in str(err.value)


def test_a_machine_too_slow_for_min_steps_stops_one_step_after_its_estimate_and_says_why(notebook_runner):
    """Issue 40's slow CPU: when the budget buys far fewer than MIN_STEPS, the notebook stops training one step
    after its estimate (after step 2, or up to WAIT_FOR_GRADIENT steps later when the steps so far had no
    gradient: the tiny model's rollouts often score alike), prints why and what to set, skips the evaluation
    after training (nothing was trained) and records the reason; the rest of the lesson still runs to the end."""
    from helpers.compute.budget import WAIT_FOR_GRADIENT

    metrics, executed = notebook_runner(NB, MAX_STEPS=8, MIN_STEPS=8, TRAIN_MINUTES=1e-4)
    text = cell_outputs_text(executed)
    reason = metrics["stopped_too_few_steps"]
    steps = metrics["steps_run"]
    assert 2 <= metrics["estimated_after_step"] <= 2 + WAIT_FOR_GRADIENT and steps == metrics["estimated_after_step"] + 1
    assert steps == metrics["steps"] and metrics["stopped_by_time_budget"] is True
    assert reason.startswith(f"STOPPED after {steps} steps") and "the 8 steps this recipe needed" in reason
    assert "TRAIN_MINUTES=" in reason and "PROFILE='gpu'" in reason and text.count(reason) == 1
    assert f"after: not evaluated: training stopped after {steps} steps" in text and "by kind: not compared" in text
    assert "accuracy_before" in metrics and metrics["budget_extended"] is False
    assert metrics["accuracy_after"] is metrics["accuracy_change"] is metrics["eval_seconds_after"] is None
    assert "then the evaluation after training: about" not in text and "metrics ->" in text


def test_mixed_only_trains_on_the_preflight_mixed_questions(notebook_runner):
    """MIXED_ONLY=True (dynamic sampling): the training rows cycle over the preflight questions whose group was
    mixed; with none mixed the run stops before training and says what to change."""
    import papermill

    try:
        metrics, _ = notebook_runner(NB, MIXED_ONLY=True, PREFLIGHT_N=6)
    except papermill.PapermillExecutionError as err:
        assert "No preflight group was mixed" in str(err)
        return
    assert metrics["mixed_only"] is True and metrics["preflight_n"] == 6 and metrics["steps"] == 2
    assert metrics["mixed_questions"] == round(metrics["preflight_mixed_share"] * 6) >= 1
    assert metrics["same_question_share"] == 1.0


def test_a_run_killed_mid_training_resumes_to_its_last_step(notebook_runner, tmp_path):
    """A Colab disconnect, simulated: notebook 01 (tiny, 6 steps, a checkpoint every 2) is killed with
    SIGKILL, kernel and servers too, once its first checkpoint is on disk. Run again with RESUME=True it
    goes on from the last checkpoint to step 6, pairs the killed run's own "before" evaluation with the
    "after" on the same questions, trains on the rows its preflight chose, and records every step."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    runs = tmp_path / "runs"
    env = {**os.environ, "AGENT_RL_RUNS": str(runs), "TRACKIO_DIR": str(tmp_path / "trackio")}
    command = [sys.executable, "-m", "papermill", str(NOTEBOOKS_DIR / f"{NB}.ipynb"), str(tmp_path / "killed.ipynb"),
               "-p", "PROFILE", "tiny", "-p", "MAX_STEPS", "6", "-p", "CHECKPOINT_STEPS", "2"]
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = runs / NB / "trainer" / "checkpoint-2" / "trainer_state.json"   # written last: the save is complete
    deadline = time.monotonic() + 900
    try:
        while not first.exists():
            assert run.poll() is None, "the run ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint after 15 minutes"
            time.sleep(0.2)
    finally:  # the kernel and the env server it started live in their own sessions: kill every descendant
        for process in psutil.Process(run.pid).children(recursive=True) + [psutil.Process(run.pid)]:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        run.wait()
    saved_before = json.loads((runs / NB / "state" / "before_eval.json").read_text())["value"]
    saved_preflight = json.loads((runs / NB / "state" / "preflight.json").read_text())["value"]
    assert not (runs / NB / "metrics.json").exists()  # killed before anything was recorded

    metrics, executed = notebook_runner(NB, runs_dir=runs, MAX_STEPS=6, CHECKPOINT_STEPS=2, RESUME=True)
    text = cell_outputs_text(executed)
    assert metrics["resumed_from"].rsplit("-", 1)[-1] in ("2", "4") and "resuming from" in text
    assert metrics["steps"] == 6 == metrics["steps_run"] == metrics["steps_planned"]
    assert len(metrics["reward_curve"]) == 6  # the killed run's logged steps are in the record too
    assert "before_eval: kept from the interrupted run" in text and "preflight: kept from the interrupted run" in text
    assert metrics["accuracy_before"] == saved_before["accuracy"] and metrics["eval_n"] == saved_before["n"]
    assert metrics["preflight_pass_at_k"] == saved_preflight["pass_at_k"]
    assert metrics["accuracy_after"] is not None and metrics["checkpoint_steps"] == 2
