"""The exported notebooks 01-04 on two processes: `accelerate launch --multi_gpu --num_processes 2` on a machine
without a GPU runs two data-parallel training processes on the CPU over PyTorch's gloo backend (torchrun under
it), the same code path as two GPUs but for the device. (`accelerate launch --cpu --num_processes 2` starts one
process: accelerate's simple launcher only fans out through mpirun.) docs/scale-out.md says what carries over.

Each run checks, from its own metrics.json (`per_process`: one record per process, written by helpers.reporting
.metrics.record_run): both processes trained the same optimizer steps to the same weights, the once-only work
(servers, teacher, preflight, evaluation, saving) ran on the main process and was handed to the other, and each
step's rollouts came from both processes without a question or game twice. Then a time budget that runs out, and
a process that dies.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

from helpers.servers import free_port
from tools.export import export
from tools.notebooks import NOTEBOOKS_DIR

pytestmark = pytest.mark.notebook

TWO_PROCESSES = ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                 "--mixed_precision", "no", "--dynamo_backend", "no"]
# what the main process runs for both (helpers.compute.processes.ONCE), per notebook
ONCE = {
    "01_grpo_walkthrough": {"environment_server", "one_group_by_hand", "run_preflight", "kept", "evaluate_policy",
                            "finish_publish"},
    "02_sft_warmup": {"start_environment", "start_teacher", "run_collect", "evaluate_policy", "finish_publish"},
    "03_wordle_rollout_func": {"environment", "play", "warm_start_games", "finish_publish"},
    "04_openreward_spec": {"start_local", "play_teacher", "evaluate_on_split", "ors_preflight", "finish_publish"},
}


def launch(tmp_path, notebook, *flags, timeout=600, popen=False, **environment):
    script = export(NOTEBOOKS_DIR / f"{notebook}.ipynb", tmp_path / "scripts" / f"{notebook}.py")
    args = [sys.executable, *TWO_PROCESSES, "--main_process_port", str(free_port()), str(script), "--profile", "tiny",
            *flags]
    env = {**os.environ, "AGENT_RL_RUNS": str(tmp_path / "runs"), "TRACKIO_DIR": str(tmp_path / "trackio"),
           "CUDA_VISIBLE_DEVICES": "", "TRL_EXPERIMENTAL_SILENCE": "1", **environment}   # CPU even where a GPU exists
    if popen:   # its output to a file: a pipe nobody reads while it runs would fill and stall it
        return subprocess.Popen(args, stdout=open(tmp_path / "launch.log", "w"), stderr=subprocess.STDOUT,
                                cwd=tmp_path, env=env, start_new_session=True)
    run = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=timeout, env=env)
    assert run.returncode == 0, failure(run)
    return json.loads((tmp_path / "runs" / notebook / "metrics.json").read_text()), run


def failure(run) -> str:
    """What a failed launch says: each process's last words (the launcher's own traceback is long and says only
    that a child failed), then the tails of both streams."""
    import re

    last_words = [line for line in run.stderr.splitlines()
                  if re.search(r"terminate called|Signal \d+|exitcode|Error:|error:|Killed|Segmentation", line)]
    return "\n".join(last_words[-20:]) + "\n--- stdout ---\n" + run.stdout[-3000:] + "\n--- stderr ---\n" + run.stderr[-4000:]


def check_trained_alike(metrics, notebook):
    """Both processes: the same steps and weights; the once-only work ran on process 0 and reached process 1."""
    main, other = metrics["per_process"]
    assert metrics["processes"] == 2 and [main["rank"], other["rank"]] == [0, 1]
    assert main["steps"] == other["steps"] > 0
    assert main["weights"] == other["weights"]
    assert set(main["once"]["ran"]) == ONCE[notebook] and not main["once"]["received"]
    assert other["once"]["received"] == main["once"]["ran"] and not other["once"]["ran"]
    return main, other


def test_notebook_01_trains_on_two_processes_and_a_time_budget_stops_both_at_one_step(tmp_path):
    # 0.001 minutes: out after the first step; the budget stops at its earliest stop (step 3), of 6 planned
    metrics, run = launch(tmp_path, "01_grpo_walkthrough", "--max-steps", "6", "--eval-n", "4",
                          "--train-minutes", "0.001", "--min-steps", "0")
    main, other = check_trained_alike(metrics, "01_grpo_walkthrough")
    assert metrics["stopped_by_time_budget"] and main["steps"] == other["steps"] == metrics["steps"] == 3
    assert metrics["steps_planned"] == 6
    # each step: one GRPO group of 4 rollouts per process (twice one process's), on two different questions
    # (which questions is fixed by SEED: the rows' question seeds and TRL's sampler are seeded; sampling is not)
    rollouts = metrics["num_generations"]
    for record in (main, other):
        assert len(record["served"]) == 3 * rollouts and record["env_pool_size"] == rollouts
    for step in range(3):
        questions = [set(r["served"][step * rollouts:(step + 1) * rollouts]) for r in (main, other)]
        assert all(len(q) == 1 for q in questions) and questions[0] != questions[1]
    # process 1's episodes: training's (3 steps x 4) and section 8's by-hand probe; the group by hand, the preflight
    # and the evaluation ran on process 0
    assert other["env_episodes"]["rollouts"] == 3 * rollouts + 1 < main["env_episodes"]["rollouts"]
    assert not main["env_episodes"]["failed"] and not other["env_episodes"]["failed"]
    # one server for both: sized for both pools; the other process started none
    assert main["env_pool_size"] + other["env_pool_size"] <= 2 * metrics["env_sessions"]
    assert run.stdout.count("local reasoning_gym server at") == 1
    out = tmp_path / "runs" / "01_grpo_walkthrough"
    assert (out / "model" / "model.safetensors").exists() and (out / "model" / "tokenizer_config.json").exists()
    assert (out / "training_curves.png").exists() and (out / "before_after.png").exists()


def test_notebook_02_trains_on_two_processes(tmp_path):
    metrics, _ = launch(tmp_path, "02_sft_warmup")
    check_trained_alike(metrics, "02_sft_warmup")
    out = tmp_path / "runs" / "02_sft_warmup"
    results = list(out.rglob("results.jsonl"))
    assert len(results) == 1   # collected once, into one file
    assert len(results[0].read_text().splitlines()) == metrics["episodes_collected"] == metrics["episodes_requested"]
    assert (out / "checkpoint" / "model.safetensors").exists()


def test_notebook_03_trains_on_two_processes(tmp_path):
    metrics, _ = launch(tmp_path, "03_wordle_rollout_func")
    main, other = check_trained_alike(metrics, "03_wordle_rollout_func")
    assert main["factory_steps"] == other["factory_steps"] == metrics["factory_steps"] > 0
    # each step's games: from both processes, twice one process's, no secret-word seed played by both
    games = defaultdict(lambda: defaultdict(list))
    for record in (main, other):
        for step, seed in record["games"]:
            games[step][record["rank"]].append(seed)
    assert len(games) == main["steps"]
    for by_process in games.values():
        assert len(by_process[0]) == len(by_process[1]) > 0
        assert not set(by_process[0]) & set(by_process[1])
    assert metrics["episodes"] == len(main["games"])   # the summary is the main process's share


def test_notebook_04_trains_on_two_processes(tmp_path):
    metrics, _ = launch(tmp_path, "04_openreward_spec")
    main, other = check_trained_alike(metrics, "04_openreward_spec")
    # every ORS session of training, per process: steps x its batch (the evaluation plays without this wrapper)
    batch = metrics["generation_batch_size"] // 2
    assert main["env_episodes"]["rollouts"] == other["env_episodes"]["rollouts"] == main["steps"] * batch
    assert not main["env_episodes"]["failed"] and not other["env_episodes"]["failed"]


def _when_training(tmp_path, launcher, timeout=300):
    """Wait until the launched 01 run trains (process 1's printed output, helpers.startup: RunWatch's first probe
    line, printed as training begins); return the launcher's processes."""
    import psutil

    log = Path(tempfile.gettempdir()) / f"agent-rl-launch{launcher.pid}-process1.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and launcher.poll() is None:
        if log.exists() and "[watch] held-out probe at step 0" in log.read_text():
            break
        time.sleep(1)
    assert launcher.poll() is None, "the run ended before it trained: " + (tmp_path / "launch.log").read_text()[-3000:]
    return psutil.Process(launcher.pid).children(recursive=True)


def _stopped_within(tmp_path, launcher, seconds):
    started = time.monotonic()
    try:
        launcher.wait(timeout=seconds + 60)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert time.monotonic() - started < seconds and launcher.returncode != 0
    return (tmp_path / "launch.log").read_text()


def test_a_process_that_dies_stops_the_run_with_its_rank_named(tmp_path):
    """Process 1 killed while the run trains: the launcher stops process 0 and exits non-zero within a minute
    (measured: a few seconds), naming rank 1 and the signal. No hang."""
    launcher = launch(tmp_path, "01_grpo_walkthrough", "--max-steps", "50", "--eval-n", "4", "--preflight-n", "0",
                      popen=True)
    victim = next(p for p in _when_training(tmp_path, launcher) if p.environ().get("RANK") == "1")
    victim.send_signal(signal.SIGKILL)
    output = _stopped_within(tmp_path, launcher, 60)
    assert "rank      : 1" in output and "Signal 9 (SIGKILL)" in output, output[-3000:]


def test_an_environment_server_that_dies_stops_the_run_with_a_clear_error(tmp_path):
    """The shared reasoning_gym server killed while both processes train: each process's client retries for a
    few seconds, then stops with the server's address and what to do (measured: the run ended 8 s after). No hang.
    The server is started as a process of its own (not forked: helpers/servers/forkserver.py), so its command line
    names it."""
    launcher = launch(tmp_path, "01_grpo_walkthrough", "--max-steps", "50", "--eval-n", "4", "--preflight-n", "0",
                      popen=True, AGENT_RL_FORKSERVER="off")
    servers = [p for p in _when_training(tmp_path, launcher) if "reasoning_gym_env" in " ".join(p.cmdline())]
    assert len(servers) == 1   # one server for both processes
    servers[0].kill()
    output = _stopped_within(tmp_path, launcher, 120)
    assert "Is the server still running? Restart it" in output, output[-3000:]
