"""STAND-INS for upstream OpenEnv's environment servers (envs/ of huggingface/OpenEnv, formerly
meta-pytorch/OpenEnv, read at commits 685de411 and 385de5eb), for the contract tests. Not upstream
code: written here from reading upstream's models and servers, built on our installed openenv's
`create_app`, with the wire shapes upstream sends (field names, types, nullability) and the
behaviour our clients must cope with:

- reasoning_gym: `question: Optional[str]` and `null` after a step, reward 0.0 after reset, a
  plain `State`, `dataset_specs` for composites. Capacity depends on the commit a Space was built
  from: up to 685de411 ONE concurrent session (`max_concurrent_envs=1` hard-coded: the second is
  refused with CAPACITY_REACHED), `reasoning_gym_app`; from 522baf00 (#619, in 385de5eb) the
  server reads `MAX_CONCURRENT_ENVS` (default 8) and builds one environment per session,
  `reasoning_gym_concurrent_app`.
- textarena (Wordle-v0): `prompt: str` required; the game's LLM-wrapper transcript (one string)
  turned into messages the way upstream does, so it arrives as ONE merged message (sender -1,
  category MESSAGE); `prompt` is that text at reset and the game id after a step; `info` carries
  `reward_signals` (wordle.greens/yellows/repetitions/correct); `seed` is ignored.
- echo: MCP-only, action `CallToolAction` / `ListToolsAction`, reset a bare `Observation` whose
  greeting is in `metadata`, tool calls without reward.

Serve with LocalServer("tests.upstream_apps:<name>_app", factory=True).

REAL UPSTREAM (opt-in): `OPENENV_UPSTREAM` names one or more checkouts of huggingface/OpenEnv
(folders outside this project, joined with os.pathsep). The contract tests then also run
upstream's own servers and clients from there, both ways: a server with `PYTHONPATH=<checkout>/src
:<checkout>/envs` (upstream's openenv core and env package, not ours), upstream's client in a child
process with the same path. Nothing of upstream is copied here; unset, those tests are skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, Field

# -- reasoning_gym ------------------------------------------------------------------------------


class UpstreamReasoningGymAction(Action):
    answer: str


class UpstreamReasoningGymObservation(Observation):
    question: Optional[str] = None
    score: Optional[float] = None
    correct_answer: Optional[str] = None
    dataset_metadata: Optional[Dict[str, Any]] = None


class UpstreamReasoningGym(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state, self._dataset, self._index, self._entry = State(episode_id=None, step_count=0), None, -1, None

    def reset(self, dataset_name: Optional[str] = None, dataset_config: Optional[Dict[str, Any]] = None,
              dataset_specs: Optional[List[Dict[str, Any]]] = None, seed: Optional[int] = None,
              size: Optional[int] = None, episode_id: Optional[str] = None) -> UpstreamReasoningGymObservation:
        import reasoning_gym
        from reasoning_gym.composite import DatasetSpec

        if dataset_name is not None:
            if seed is None or size is None:
                raise ValueError("seed and size must be provided when dataset_name is specified")
            if dataset_name == "composite":
                parts = [DatasetSpec(name=p["name"], weight=p.get("weight", 1), config=p.get("config", {}))
                         for p in dataset_specs]
                self._dataset = reasoning_gym.create_dataset("composite", size=size, seed=seed, datasets=parts)
            else:
                self._dataset = reasoning_gym.create_dataset(dataset_name, size=size, seed=seed,
                                                             **(dataset_config or {}))
            self._index = -1
        elif self._dataset is None:
            self._dataset, self._index = reasoning_gym.create_dataset("leg_counting", size=1000, seed=42), -1
        self._index = (self._index + 1) % len(self._dataset)
        self._entry = self._dataset[self._index]
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return UpstreamReasoningGymObservation(question=self._entry["question"], done=False, reward=0.0)

    def step(self, action: UpstreamReasoningGymAction) -> UpstreamReasoningGymObservation:  # type: ignore[override]
        self._state.step_count += 1
        if self._entry is None:
            return UpstreamReasoningGymObservation(done=True, reward=0.0)
        score = self._dataset.score_answer(action.answer, self._entry)
        metadata = self._entry.get("metadata") or None
        return UpstreamReasoningGymObservation(question=None, score=score, correct_answer=self._entry["answer"],
                                               dataset_metadata=metadata, done=True, reward=float(score))

    @property
    def state(self) -> State:
        return self._state


def reasoning_gym_app():
    """Up to 685de411: `max_concurrent_envs=1` hard-coded (a Space built then still refuses a 2nd session)."""
    return create_app(UpstreamReasoningGym, UpstreamReasoningGymAction, UpstreamReasoningGymObservation,
                      env_name="reasoning_gym", max_concurrent_envs=1)


def reasoning_gym_concurrent_app():
    """From 522baf00 (#619; 385de5eb): a factory per session, `MAX_CONCURRENT_ENVS` (default 8), a non-integer
    refused at start."""
    raw = os.environ.get("MAX_CONCURRENT_ENVS", "8")
    try:
        sessions = int(raw)
    except ValueError:
        raise ValueError(f"MAX_CONCURRENT_ENVS must be an integer, got: {raw!r}") from None
    return create_app(lambda: UpstreamReasoningGym(), UpstreamReasoningGymAction, UpstreamReasoningGymObservation,
                      env_name="reasoning_gym", max_concurrent_envs=sessions)


# -- textarena ----------------------------------------------------------------------------------


class UpstreamTextArenaMessage(BaseModel):
    sender_id: int
    content: str
    category: str


class UpstreamTextArenaAction(Action):
    message: str


class UpstreamTextArenaObservation(Observation):
    prompt: str
    messages: List[UpstreamTextArenaMessage] = Field(default_factory=list)
    current_player_id: int = 0
    legal_players: List[int] = Field(default_factory=list)
    info: Dict[str, Any] = Field(default_factory=dict)


class UpstreamTextArena(Environment):
    """Wordle-v0 through textarena's default wrappers (LLM observation text), upstream-style."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        from textarena_env.offline_nltk import use_offline_nltk

        use_offline_nltk()
        import textarena as ta

        self._game = ta.make(env_id="Wordle-v0")
        self._game.reset(num_players=1)
        self._seen: Dict[str, int] = {}
        self._state = State(episode_id=None, step_count=0)

    def _inner(self):
        game = self._game
        while hasattr(game, "env"):
            game = game.env
        return game

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        game = self._game
        while hasattr(game, "env"):  # upstream clears the wrappers' accumulated observations
            if hasattr(game, "full_observations"):
                game.full_observations = {}
            game = game.env
        self._game.reset(num_players=1)  # the seed is not passed on: upstream ignores it
        if "word" in kwargs:  # a test hook only (upstream drops unknown kwargs), to make games winnable
            self._inner().state.game_state["secret_word"] = kwargs["word"]
        self._seen = {}
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return self._observation(reward=0.0, done=False)

    def step(self, action: UpstreamTextArenaAction) -> UpstreamTextArenaObservation:  # type: ignore[override]
        done, info = self._game.step(action.message)
        self._state.step_count += 1
        rewards = self._inner().state.rewards
        reward = float(rewards.get(0, 0.0)) if isinstance(rewards, dict) else 0.0
        observation = self._observation(reward=reward, done=bool(done))
        guess = (re.findall(r"\[([a-z]{5})\]", action.message.lower()) or [""])[0]
        repeats = self._seen.get(guess, 0)
        self._seen[guess] = repeats + 1
        lines = [line.replace(" ", "") for line in observation.messages[0].content.splitlines()]
        marks = [line for line in lines if line and set(line) <= set("GYX") and len(line) == 5]
        last = marks[-1] if marks else ""
        observation.info["reward_signals"] = {"wordle.greens": last.count("G") / 5, "wordle.yellows": last.count("Y") / 5,
                                              "wordle.repetitions": 1.0 - repeats, "wordle.correct": reward}
        return observation

    def _observation(self, reward: float, done: bool) -> UpstreamTextArenaObservation:
        player, text = self._game.get_observation()
        merged = [UpstreamTextArenaMessage(sender_id=-1, content=str(text), category="MESSAGE")] if text else []
        turn = getattr(self._inner().state, "turn", 0)
        prompt = merged[0].content if (turn == 0 and merged) else "Wordle-v0"
        return UpstreamTextArenaObservation(prompt=prompt.strip(), messages=merged, current_player_id=player,
                                            legal_players=[0], info={}, reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state


def textarena_app():
    return create_app(UpstreamTextArena, UpstreamTextArenaAction, UpstreamTextArenaObservation,
                      env_name="textarena_env", max_concurrent_envs=8)


# -- echo ---------------------------------------------------------------------------------------


class UpstreamEcho(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("echo_env")

        @mcp.tool
        def echo_message(message: str) -> str:
            """Echo back the provided message.

            Args:
                message: The message to echo back
            """
            return message

        @mcp.tool
        def echo_with_length(message: str) -> dict:
            """Echo back the message with its length.

            Args:
                message: The message to echo back
            """
            return {"message": message, "length": len(message)}

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return Observation(done=False, reward=0.0, metadata={"status": "ready", "message": "Echo environment ready!"})

    def _step_impl(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": f"Unknown action type: {type(action).__name__}."})

    @property
    def state(self) -> State:
        return self._state


def echo_app():
    return create_app(UpstreamEcho, CallToolAction, CallToolObservation, env_name="echo_env", max_concurrent_envs=8)


# -- real upstream snapshots (opt-in: OPENENV_UPSTREAM) ---------------------------------------------

UPSTREAM_VAR = "OPENENV_UPSTREAM"
ENVS_DIR = Path(__file__).resolve().parents[1] / "envs"


def upstream_snapshots() -> list[Path]:
    """The checkouts named by $OPENENV_UPSTREAM (each must hold src/openenv and envs/)."""
    found = []
    for entry in os.environ.get(UPSTREAM_VAR, "").split(os.pathsep):
        if not entry.strip():
            continue
        path = Path(entry).expanduser().resolve()
        if not (path / "src" / "openenv").is_dir() or not (path / "envs").is_dir():
            raise RuntimeError(f"{UPSTREAM_VAR}: {path} is not a checkout of huggingface/OpenEnv "
                               f"(src/openenv and envs/ expected)")
        if ENVS_DIR.parent in path.parents or path == ENVS_DIR.parent:
            raise RuntimeError(f"{UPSTREAM_VAR}: keep upstream's checkout outside this project ({path})")
        found.append(path)
    return found


def snapshot_label(path: Path) -> str:
    """The checkout's commit (8 hex digits) when it is a git checkout, else its folder name."""
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short=8", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return path.name


def snapshot_params():
    """pytest params for a fixture: one per snapshot, or one skipped param when none is named."""
    import pytest

    snapshots = upstream_snapshots()
    if not snapshots:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"set {UPSTREAM_VAR} to a checkout of huggingface/OpenEnv to run upstream's own code"))]
    return [pytest.param(path, id=snapshot_label(path)) for path in snapshots]


def snapshot_env(path: Path) -> dict[str, str]:
    """Environment variables that make a process import upstream's openenv and env packages from `path`."""
    return {"PYTHONPATH": os.pathsep.join([str(path / "src"), str(path / "envs")])}


def snapshot_app_source(path: Path, env: str) -> str:
    """Upstream's server/app.py of `env` at that snapshot (read, to know what it should do)."""
    return (path / "envs" / env / "server" / "app.py").read_text()


def snapshot_server_app(env: str) -> str:
    """The LocalServer app spec of upstream's server for `env` (run with snapshot_env's PYTHONPATH)."""
    return {"textarena_env": "tests.upstream_apps:real_textarena_app"}.get(env, f"{env}.server.app:app")


def real_textarena_app():
    """Upstream's textarena_env server app, imported after our offline NLTK data is in place (upstream's
    environment downloads NLTK's word list and tagger, which fails offline). Our offline_nltk module is
    loaded from its file: the name `textarena_env` is upstream's package in this process."""
    spec = importlib.util.spec_from_file_location("offline_nltk", ENVS_DIR / "textarena_env" / "offline_nltk.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.use_offline_nltk()
    from textarena_env.server.app import app  # upstream's, from PYTHONPATH

    return app


def run_upstream_client(path: Path, code: str, base_url: str, timeout: float = 180.0) -> Any:
    """Run `code` (which prints one JSON line last) in a child process that imports upstream's packages from
    the snapshot at `path`; BASE_URL is in its environment. Returns the parsed JSON."""
    env = {**os.environ, **snapshot_env(path), "BASE_URL": base_url, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(path), capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"upstream client failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
