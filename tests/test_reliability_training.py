"""Faults during training: the environment server dies, hangs, or is not there at all.

A real GRPOTrainer (the `tiny-toolcall` model, a few tiny steps) trains against a real
reasoning_gym server through notebook 01's own `ReasoningGymTrainEnv` (its "env-class" cell, loaded
with tools.notebooks.load_cells, so an edit to the notebook's class is what runs here). TRL hands a
tool's exception back to the model as text, so a dead server during a tool call alone would silently
turn into zero rewards; what must stop training is the next `reset()`, with a `ConnectionError` that
names the server, within a bounded time.

The class's client is `helpers.servers.resilient`: a Space waking (503), a full server and connections
dropped mid-episode are ridden through (tests/fault_proxy.py in front of the real server), every rollout
scored by the environment or counted as failed with no reward; only a server gone for good (refusing
connections past the wrapper's `refused_timeout_s`) still stops training with that clear error.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from helpers.model_folders import resolve_model
from helpers.profiles import resolve_settings
from helpers.prompts import SYSTEM_PROMPT
from helpers.servers import LocalServer
from helpers.servers.resilient import TOTALS, EpisodeFailed
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
from tools.notebooks import NOTEBOOKS_DIR, load_cells

RG_APP = "reasoning_gym_env.server.app:app"
NB = "01_grpo_walkthrough"
# `tiny-toolcall` learned the tool-call format on 1-digit sums: with those it calls the tool.
ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def notebook_env_class(base_url: str):
    """Notebook 01's environment class, its globals seeded as the notebook's earlier cells set them (the tiny
    profile, 1-digit sums) and `env_url` pointing at `base_url`. Its `served` list counts the resets."""
    namespace = load_cells(NOTEBOOKS_DIR / f"{NB}.ipynb", "env-class", namespace={
        "dataset_name": "chain_sum", "dataset_config": ONE_DIGIT, "env_url": base_url,
        "settings": resolve_settings(NB, "tiny", quiet=True)})
    return namespace["ReasoningGymTrainEnv"]


def make_trainer(env_class, max_steps: int, output_dir):
    """A GRPOTrainer on `env_class` (notebook 01's); its reward is the class's own `get_reward()`."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_dict({"prompt": [[{"role": "system", "content": SYSTEM_PROMPT},
                                             {"role": "user", "content": ""}]] * 64})
    config = GRPOConfig(
        output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=2,
        num_generations=2, max_completion_length=24, learning_rate=1e-5, logging_steps=1,
        save_strategy="no", report_to="none", use_cpu=True, bf16=False, disable_tqdm=True,
        chat_template_kwargs={"enable_thinking": False}, max_tool_calling_iterations=1, seed=0,
    )
    return GRPOTrainer(model=resolve_model("tiny-toolcall"), train_dataset=dataset, args=config,
                       environment_factory=env_class)


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(autouse=True)
def quiet_trl(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def test_server_killed_mid_run_stops_training_with_a_clear_error_then_a_restart_trains(tmp_path):
    server = LocalServer(RG_APP, env={"MAX_CONCURRENT_ENVS": "16"}, name="reasoning_gym",
                         log_dir=tmp_path / "logs").start()
    pid, url, port = server.process.pid, server.base_url, server.port
    env_class = notebook_env_class(url)
    trainer = make_trainer(env_class, max_steps=500, output_dir=tmp_path / "run1")
    served = env_class.served   # every question the class handed out: one per reset
    killed_at = []

    def kill_after_two_batches():
        deadline = time.monotonic() + 120
        while len(served) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(pid, signal.SIGKILL)  # the server dies without a word
        killed_at.append((time.monotonic(), trainer.state.global_step))

    killer = threading.Thread(target=kill_after_two_batches, daemon=True)
    killer.start()
    try:
        with pytest.raises(ConnectionError) as info:
            trainer.train()
        stopped_at = time.monotonic()
    finally:
        killer.join(timeout=5)
        server.stop()
    assert killed_at, "training never got far enough to kill the server"
    message = str(info.value)
    assert url in message and "reasoning_gym server" in message, message
    # Bounded: the tool calls of the step under way fail (TRL shows the model the error text), and
    # the next step's first reset() stops training. Never more than one more step; never a hang.
    killed_time, killed_step = killed_at[0]
    assert trainer.state.global_step <= killed_step + 1, "training went on after the server died"
    assert stopped_at - killed_time < 300
    # the helpers cleaned up: no server process left behind, nothing marked running
    assert not server.is_running() and process_gone(pid)

    # Restarted (same port, as a hosted server would come back), a new run trains to the end.
    with LocalServer(RG_APP, port=port, env={"MAX_CONCURRENT_ENVS": "16"}, name="reasoning_gym",
                     log_dir=tmp_path / "logs2"):
        trainer = make_trainer(notebook_env_class(url), max_steps=2, output_dir=tmp_path / "run2")
        trainer.train()
    assert trainer.state.global_step == 2
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)


def test_training_against_no_server_fails_at_the_first_reset(tmp_path):
    from helpers.servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    trainer = make_trainer(notebook_env_class(url), max_steps=2, output_dir=tmp_path / "run")
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"reasoning_gym server at {url}: cannot connect"):
        trainer.train()
    assert time.monotonic() - start < 15
    assert trainer.state.global_step == 0


def test_a_hung_then_dead_server_is_a_connection_error_naming_it(tmp_path):
    """SIGSTOP (port open, no answer: a stuck process) then SIGKILL (connection lost mid-episode)."""
    server = LocalServer(RG_APP, name="reasoning_gym", log_dir=tmp_path / "logs").start()
    try:
        with ReasoningGymEnv(base_url=server.base_url, message_timeout_s=1.5).sync() as env:
            env.reset()
            os.killpg(server.process.pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                with pytest.raises(ConnectionError, match="no answer within 1.5 s") as info:
                    env.step(ReasoningGymAction(answer="1"))
                assert time.monotonic() - start < 5
                assert server.base_url in str(info.value)
            finally:
                os.killpg(server.process.pid, signal.SIGCONT)
            # the server is back: the same client reconnects by itself, as a new session
            assert env.reset().observation.question

            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
            # a tool call after the server died: a ConnectionError naming it (TRL shows the model
            # this text), not a bare websockets exception
            with pytest.raises(ConnectionError, match=server.base_url):
                env.step(ReasoningGymAction(answer="1"))
            with pytest.raises(ConnectionError, match="cannot connect"):
                env.reset()
    finally:
        server.stop()


def test_training_rides_through_a_waking_start_and_dropped_sessions(tmp_path, capsys):
    """Through the fault proxy: 503 for the first 3 s (a Space waking; 30 s and more when hosted) and every
    5th reply from the server dropped. The run finishes its steps; each rollout the model answered is either
    scored by the environment or counted as failed with reward 0."""
    from fault_proxy import FaultProxy

    with LocalServer(RG_APP, env={"MAX_CONCURRENT_ENVS": "16"}, name="reasoning_gym",
                     log_dir=tmp_path / "logs") as server, FaultProxy(server.base_url, seed=1) as proxy:
        base = notebook_env_class(proxy.url)
        outcomes = []   # (answered, failed, reward) per rollout

        class Watched(base):
            def reset(self, *args, **kwargs):
                self._failed = self._answered = False
                return super().reset(*args, **kwargs)

            def answer(self, answer: str) -> str:
                self._answered = True
                try:
                    return super().answer(answer)
                except EpisodeFailed:
                    self._failed = True
                    raise

            def get_reward(self) -> float:
                reward = super().get_reward()
                outcomes.append((self._answered, self._failed, reward))
                return reward

        TOTALS.clear()
        trainer = make_trainer(Watched, max_steps=3, output_dir=tmp_path / "run")
        proxy.wake_for(3.0)
        proxy.drop_every = 5
        start = time.monotonic()
        trainer.train()
        wall = time.monotonic() - start
    totals = TOTALS.as_dict()
    assert trainer.state.global_step == 3
    assert proxy.stats["answered_503"] >= 1 and proxy.stats["dropped"] >= 1
    assert f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes" in capsys.readouterr().out
    print(f"proxy {proxy.stats} totals {totals} wall {wall:.1f} s")  # for the report (pytest -rP)
    assert totals["rollouts"] == len(outcomes) and totals["retried"] >= 1
    failed = [o for o in outcomes if o[1]]
    assert len(failed) == totals["failed"] and all(reward == 0.0 for _, _, reward in failed)
    assert totals["scored"] == sum(1 for answered, was_failed, _ in outcomes if answered and not was_failed)


def test_wordle_rollout_func_rides_through_a_waking_start_and_dropped_sessions(tmp_path, capsys):
    """Notebook 03's own rollout_func (its "rollout-func" and "reward-funcs" cells) through the fault proxy in front of
    the real TextArena server: 503 for the first 2 s and every 7th reply dropped. Training finishes its steps; each
    game is either played to its end and scored, or counted as failed with every reward stream 0."""
    from datasets import Dataset
    from fault_proxy import FaultProxy
    from trl import GRPOConfig, GRPOTrainer

    from helpers import wordle
    from helpers.rollouts.checks import checked_rewards, checked_rollout

    cells = load_cells(NOTEBOOKS_DIR / "03_wordle_rollout_func.ipynb", "rollout-func", "reward-funcs")
    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "16"}, name="textarena",
                     log_dir=tmp_path / "logs") as server, FaultProxy(server.base_url, seed=2) as proxy:
        TOTALS.clear()
        rollout = cells["WordleRollout"](proxy.url, max_turns=3, seed=0, words=["crane", "slate", "house", "plant"])
        config = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=4,
                            num_generations=2, max_completion_length=8, learning_rate=1e-5, logging_steps=1,
                            save_strategy="no", report_to="none", use_cpu=True, bf16=False, disable_tqdm=True,
                            seed=0)
        trainer = GRPOTrainer(model=resolve_model("tiny"), reward_funcs=checked_rewards(cells["reward_funcs"]),
                              train_dataset=Dataset.from_dict({"prompt": [wordle.DATASET_PROMPT] * 12}),
                              rollout_func=checked_rollout(rollout), args=config)
        proxy.wake_for(2.0)
        proxy.drop_every = 7
        trainer.train()
        rollout.close()
    assert trainer.state.global_step == 3 and len(rollout.episodes) == 3 * 4
    assert proxy.stats["answered_503"] >= 1 and proxy.stats["dropped"] >= 1
    assert f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes" in capsys.readouterr().out
    failed = [e for e in rollout.episodes if e["failed"]]
    assert failed and all(value == 0.0 for e in failed for value in e["streams"].values())
    assert TOTALS.as_dict()["failed"] == len(failed)
    print(f"proxy {proxy.stats} totals {TOTALS.as_dict()} games {len(rollout.episodes)}")   # for the report (-rP)
