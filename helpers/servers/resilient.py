"""Ride through what hosted environments really do: sleep, fill up, drop connections, answer slowly.

    client = resilient(ReasoningGymEnv, base_url=env_url)      # instead of ReasoningGymEnv(...).sync()
    client.reset(dataset_name="chain_sum", seed=3, size=1000)
    client.step(ReasoningGymAction(answer="7"))
    client.stats          # rollouts, scored, retried, failed, reconnects, waited_s (TOTALS: every wrapper)

`resilient` wraps an OpenEnv `EnvClient` class's blocking (`.sync()`) client; the wrapper has the same
`reset` / `step` / `state` / `close` calls. What it does about each fault:

| fault                                   | what the wrapper does                                                   |
|-----------------------------------------|-------------------------------------------------------------------------|
| 502/503/504 on connect, or no answer to | a Space waking: retried with backoff for up to `wake_timeout_s` (180 s), |
| the connect (a Space asleep)            | announced once; after that a `ConnectionError` saying what to check     |
| connection refused (nothing listening)  | retried for `refused_timeout_s` (5 s), then the client's own error      |
| CAPACITY_REACHED (all sessions taken)   | waited for up to `capacity_timeout_s` (60 s), announced once; then an   |
|                                         | `EnvironmentFull` naming the capacity and what to do                    |
| connection lost / no answer mid-call    | a new session; the session's journal replayed and checked (below);      |
|                                         | up to `max_reconnects` (3) times per call                               |
| a server error (bad argument, ...)      | raised unchanged: repeating it would fail the same way                  |

A call is never sent twice on one session: once a connection drops, the server's session (and the
environment state in it) is gone, so the wrapper opens a new session and rebuilds the state by
replaying the calls that made it, comparing each replayed observation with the one seen the first
time. What a retry may repeat, per environment:

| environment   | call                          | effect of repeating it          | after a drop                       |
|---------------|-------------------------------|---------------------------------|------------------------------------|
| reasoning_gym | reset(dataset_name/seed/...)  | rebuilds the dataset: same      | resent on the new session          |
|               |                               | question 0 (idempotent)         |                                    |
| reasoning_gym | reset()  (next question)      | advances the question index:    | replayed from the last dataset     |
|               |                               | NOT idempotent                  | reset (<= `max_replay` calls),     |
|               |                               |                                 | each question checked              |
| reasoning_gym | step(answer)                  | scores and ends the episode;    | resent once the episode's question |
|               |                               | pure given the question         | is replayed and matches; else the  |
|               |                               |                                 | episode is failed                  |
| textarena     | reset(seed= / word=)          | a new game                      | resent (a new game either way)     |
| textarena     | step(guess)                   | uses up a turn: NOT idempotent; | never replayed: the game is failed |
|               |                               | upstream ignores seed/word, so  | (`EpisodeFailed`, no reward)       |
|               |                               | a replayed game may differ      |                                    |
| echo, others  | reset                         | a new episode                   | resent                             |
| echo, others  | step                          | unknown                         | never replayed: episode failed     |

A reasoning_gym reset whose replay keeps dropping (or is over `max_replay`) rebuilds the dataset from its
first question instead (`stats.restarted`): the question stream repeats, nothing is scored twice.

A failed episode raises `EpisodeFailed` (a `ConnectionError`) from `step`, is counted in `stats.failed`,
and must not be scored: the caller's reward stays at its reset value (0). The next `reset` starts over
on a new session. A server gone for good still ends in a `ConnectionError` naming it, within
`refused_timeout_s` (or `wake_timeout_s` while a proxy in front answers 503).

ORS sessions (notebook 04, TRL's `OpenRewardSpec`) ride out the same faults through
`helpers.openreward.resilient`, which shares these counts (`TOTALS`) and announcements.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["resilient", "ResilientClient", "ResilienceStats", "EpisodeFailed", "EnvironmentFull",
           "ReplayRule", "RULES", "TOTALS", "classify", "announce", "settled", "Patience"]


class EpisodeFailed(ConnectionError):
    """The session was lost mid-episode and the episode cannot be replayed: counted as failed, no reward."""


class EnvironmentFull(RuntimeError):
    """The server refused a session (CAPACITY_REACHED) for longer than the wrapper waits."""


@dataclass
class ResilienceStats:
    """Counts over every call of one wrapper (or, for `TOTALS`, of all of them)."""

    rollouts: int = 0      # episodes started (resets answered)
    scored: int = 0        # steps that ended an episode with the environment's own result
    retried: int = 0       # calls that succeeded on a reopened session (replayed when needed)
    failed: int = 0        # episodes lost and marked failed (no reward)
    reconnects: int = 0    # new sessions opened after a drop, a 503 or a refusal
    restarted: int = 0     # replays cut short: the dataset rebuilt from its start (reasoning_gym resets)
    waited_s: float = 0.0  # time spent waiting (backoff) for a waking or full server
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()
                if not k.startswith("_")}

    def clear(self) -> None:
        with self._lock:
            self.rollouts = self.scored = self.retried = self.failed = self.reconnects = self.restarted = 0
            self.waited_s = 0.0


TOTALS = ResilienceStats()  # every wrapper in this process adds here too


@dataclass(frozen=True)
class ReplayRule:
    """What a retry may repeat for one environment (see the table in the module docstring)."""

    name: str
    rebuilds: Callable[[dict], bool]   # does this reset (its kwargs) alone define the session's state?
    plain_reset_replayable: bool       # is a reset without arguments deterministic given the journal?
    replay_steps: bool                 # may a dropped step be resent after its episode is replayed?
    fingerprint: Callable[[Any], Any]  # what a replayed result must match


def _observation_fingerprint(result: Any) -> Any:
    obs = getattr(result, "observation", None)
    if obs is None:
        return None
    try:
        data = obs.model_dump()
    except AttributeError:
        return repr(obs)
    data.pop("metadata", None)
    return data


_RG_DATASET_ARGS = ("dataset_name", "dataset_config", "dataset_specs", "seed", "size")

RULES = {
    "ReasoningGymEnv": ReplayRule(
        "reasoning_gym", rebuilds=lambda kw: any(kw.get(k) is not None for k in _RG_DATASET_ARGS),
        plain_reset_replayable=True, replay_steps=True,
        fingerprint=lambda r: (getattr(r.observation, "question", None),
                               getattr(r.observation, "score", None), r.done)),
    "TextArenaEnv": ReplayRule("textarena", rebuilds=lambda kw: True, plain_reset_replayable=False,
                               replay_steps=False, fingerprint=_observation_fingerprint),
}
DEFAULT_RULE = ReplayRule("default", rebuilds=lambda kw: True, plain_reset_replayable=False,
                          replay_steps=False, fingerprint=_observation_fingerprint)

# -- telling faults apart -----------------------------------------------------------------------


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)  # websockets InvalidStatus
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def classify(exc: BaseException) -> tuple[str | None, str]:
    """(kind, detail): kind is "capacity", "waking", "refused", "lost" or None (not a fault to retry)."""
    chain = list(_chain(exc))
    for e in chain:
        if isinstance(e, RuntimeError) and "CAPACITY_REACHED" in str(e):
            return "capacity", str(e)
    for e in chain:
        status = _http_status(e)
        if status is not None:
            return ("waking", str(status)) if status in (502, 503, 504) else (None, f"HTTP {status}")
    connecting = any("ailed to connect" in str(e) or "cannot connect" in str(e) for e in chain)
    for e in chain:
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return "refused", "connection refused"
    if connecting:
        if any(isinstance(e, (TimeoutError, asyncio.TimeoutError)) for e in chain):
            return "waking", "no answer"
        return "refused", str(chain[-1]) or type(chain[-1]).__name__
    from websockets.exceptions import ConnectionClosed

    for e in chain:
        if isinstance(e, (ConnectionClosed, TimeoutError, asyncio.TimeoutError, OSError)):
            return "lost", str(e) or type(e).__name__
    return None, str(exc)


def _span(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} s"


_ANNOUNCED: set = set()       # (url, kind) announced in the current outage: one line per URL, not per session
_ANNOUNCE_LOCK = threading.Lock()


def announce(url: str, kind: str, line: str, out: Callable[[str], None] = print) -> None:
    """Say `line` once per outage of `url` (kind "waking" or "capacity"), however many sessions wait on it."""
    with _ANNOUNCE_LOCK:
        if (url, kind) in _ANNOUNCED:
            return
        _ANNOUNCED.add((url, kind))
    out(line)


def settled(url: str) -> None:
    """The outage of `url` is over: a later one is announced again."""
    with _ANNOUNCE_LOCK:
        _ANNOUNCED.discard((url, "waking"))
        _ANNOUNCED.discard((url, "capacity"))


class Patience:
    """The waits of one call through the faults worth waiting out (waking, full, refused): for each kind, when it
    was first seen, and the next pause, doubling from 0.25 s to 10 s and never past the kind's limit."""

    def __init__(self):
        self.first: dict[str, float] = {}
        self.backoff = 0.25

    def next_pause(self, kind: str, limit: float) -> tuple[float | None, float]:
        """(seconds to sleep, or None once `limit` has passed since `kind` was first seen; seconds waited so far)."""
        now = time.monotonic()
        waited = now - self.first.setdefault(kind, now)
        if waited >= limit:
            return None, waited
        pause = min(self.backoff, max(0.05, limit - waited))
        self.backoff = min(self.backoff * 2, 10.0)
        return pause, waited


class _ReplayMismatch(Exception):
    pass


class ResilientClient:
    """A blocking OpenEnv client that reopens its session and replays it (see the module docstring)."""

    def __init__(self, client_factory: Callable[..., Any], *, wake_timeout_s: float = 180.0,
                 capacity_timeout_s: float = 60.0, refused_timeout_s: float = 5.0, max_reconnects: int = 3,
                 max_replay: int = 256, rule: ReplayRule | None = None, out: Callable[[str], None] = print,
                 **client_kwargs: Any):
        self._factory = client_factory
        self._kwargs = client_kwargs
        self.url = str(client_kwargs.get("base_url") or "")
        self.rule = rule or next((RULES[c.__name__] for c in getattr(client_factory, "__mro__", ())
                                  if c.__name__ in RULES), DEFAULT_RULE)
        self.wake_timeout_s, self.capacity_timeout_s = wake_timeout_s, capacity_timeout_s
        self.refused_timeout_s, self.max_reconnects, self.max_replay = refused_timeout_s, max_reconnects, max_replay
        self.out = out
        self.stats = ResilienceStats()
        self._client = None
        self._journal: list = []      # [(kind, payload, fingerprint)] since the last rebuilding reset
        self._replayable = False      # can the journal rebuild the session's state on a new session?
        self._episode_failed = False
        self._lock = threading.RLock()

    # -- the client's calls --

    def connect(self) -> "ResilientClient":
        with self._lock:
            self._run(lambda c: c.connect(), "connect")
        return self

    def reset(self, **kwargs: Any) -> Any:
        with self._lock:
            rebuilds = self.rule.rebuilds(kwargs)
            result = self._run(lambda c: c.reset(**kwargs), "reset", replay=not rebuilds)
            fp = self.rule.fingerprint(result)
            if rebuilds:
                self._journal = [("reset", kwargs, fp)]
                self._replayable = True
            elif self.rule.plain_reset_replayable:
                self._journal = [e for e in self._journal if e[0] == "reset"] + [("reset", kwargs, fp)]
            else:
                self._journal, self._replayable = [], False
            self._episode_failed = False
            self._add(rollouts=1)
            return result

    def step(self, action: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._episode_failed:
                raise EpisodeFailed(f"environment at {self.url}: this episode was already lost and counted "
                                    f"as failed; reset() to start a new one.")
            try:
                result = self._run(lambda c: c.step(action, **kwargs), "step", replay=True)
            except EpisodeFailed:
                raise
            except Exception as exc:
                if classify(exc)[0] is not None:   # the server went away for good: this episode is lost too
                    self._fail_episode("the server is gone", exc)
                raise
            if self.rule.plain_reset_replayable or self.rule.replay_steps:
                self._journal.append(("step", (action, kwargs), self.rule.fingerprint(result)))
            if getattr(result, "done", False):
                self._add(scored=1)
            return result

    def state(self) -> Any:
        with self._lock:
            return self._run(lambda c: c.state(), "state", replay=True)

    def close(self) -> None:
        with self._lock:
            self._drop_client()

    disconnect = close

    def __enter__(self) -> "ResilientClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:  # anything else: the current session's client
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._ensure_client(), name)

    def __repr__(self) -> str:
        return f"resilient({getattr(self._factory, '__name__', self._factory)}, base_url={self.url!r})"

    # -- machinery --

    def _add(self, **counts) -> None:
        self.stats.add(**counts)
        TOTALS.add(**counts)

    def _ensure_client(self):
        if self._client is None:
            self._client = self._factory(**self._kwargs).sync()
        return self._client

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _replay(self, client, journal: list) -> None:
        """Rebuild the lost session's state on `client` from `journal`, checking every result."""
        for kind, payload, fp in journal:
            if kind == "reset":
                result = client.reset(**payload)
            else:
                action, kwargs = payload
                result = client.step(action, **kwargs)
            if self.rule.fingerprint(result) != fp:
                raise _ReplayMismatch(f"the replayed {kind} answered differently from the first time")

    def _fail_episode(self, why: str, exc: BaseException) -> EpisodeFailed:
        self._episode_failed = True
        self._drop_client()   # whatever that session holds now is not the episode's state
        if self.rule.plain_reset_replayable and self._replayable:
            self._journal = self._journal[:1]   # keep what built the dataset: the next reset() starts it over
        else:
            self._journal, self._replayable = [], False
        self._add(failed=1)
        return EpisodeFailed(f"environment at {self.url}: the session was lost during this episode and it "
                             f"cannot be replayed ({why}); the episode is counted as failed and gets no reward.")

    def _announce(self, kind: str, line: str) -> None:
        announce(self.url, kind, line, self.out)

    def _settled(self) -> None:
        settled(self.url)

    def _run(self, call: Callable[[Any], Any], what: str, replay: bool = False) -> Any:
        """`call` on a live session, reopening it (and replaying the journal) through the faults it rides out.
        `replay`: the call depends on the session's state (a step, a plain reset), so a new session first
        gets the journal replayed."""
        patience = Patience()
        lost = 0
        retried = False
        while True:
            fresh = self._client is None
            client = self._ensure_client()
            try:
                if fresh and replay and self._journal:
                    todo = self._journal
                    if not self._replayable or (what == "step" and not self.rule.replay_steps):
                        if what == "step":
                            raise self._fail_episode(f"a {self.rule.name} episode is not replayed", None)
                        todo = []
                    elif len(todo) > self.max_replay or (what == "reset" and lost >= 2):
                        if what == "step":
                            raise self._fail_episode(f"over {self.max_replay} calls to replay", None)
                        todo = todo[:1]   # a plain reset: start the question stream over instead
                        self._add(restarted=1)
                    try:
                        self._replay(client, todo)
                        self._journal = list(todo)
                    except _ReplayMismatch as exc:
                        if what == "step":
                            raise self._fail_episode(str(exc), exc) from None
                        raise ConnectionError(f"environment at {self.url}: the session was lost and could not "
                                              f"be rebuilt ({exc}). Reset with the dataset arguments to start "
                                              f"over.") from None
                result = call(client)
            except Exception as exc:  # noqa: BLE001 - classified below; anything else is re-raised
                if isinstance(exc, EpisodeFailed):
                    raise
                kind, detail = classify(exc)
                if kind is None:
                    raise
                self._drop_client()
                retried = True
                if kind == "lost":
                    lost += 1
                    if lost > self.max_reconnects:
                        if what == "step":
                            raise self._fail_episode(f"dropped {lost} times", exc) from exc
                        raise
                    if what == "step" and not self.rule.replay_steps:
                        raise self._fail_episode(f"a {self.rule.name} step is not replayed", exc) from exc
                    self._add(reconnects=1)
                    continue
                limit = {"waking": self.wake_timeout_s, "capacity": self.capacity_timeout_s,
                         "refused": self.refused_timeout_s}[kind]
                pause, waited = patience.next_pause(kind, limit)
                if pause is None:
                    raise self._gave_up(kind, detail, waited, exc) from exc
                if kind == "waking":
                    self._announce(kind, f"environment at {self.url} is starting ({detail}); retrying for up to "
                                         f"{_span(self.wake_timeout_s)}")
                elif kind == "capacity":
                    self._announce(kind, f"environment at {self.url} is full ({_capacity(detail)}); waiting up "
                                         f"to {_span(self.capacity_timeout_s)} for a session to free up")
                time.sleep(pause)
                self._add(waited_s=pause, reconnects=1)
                continue
            if retried:
                self._add(retried=1)
                self._settled()
            return result

    def _gave_up(self, kind: str, detail: str, waited: float, exc: BaseException) -> Exception:
        self._settled()   # a later outage is announced again
        if kind == "capacity":
            return EnvironmentFull(
                f"environment at {self.url} is full: {_capacity(detail)} (CAPACITY_REACHED), still after "
                f"waiting {waited:.0f} s. Every rollout running at once holds one session: run fewer at once "
                f"(a smaller generation batch), raise MAX_CONCURRENT_ENVS on a server you run, or duplicate "
                f"the Space to have your own.")
        if kind == "waking":
            return ConnectionError(
                f"environment at {self.url} still answers {detail} after {waited:.0f} s of retrying: the Space "
                f"may be failing to start or paused. Open it in a browser to see its state and logs, or leave "
                f"ENV_BASE_URL empty to start a local server.")
        return ConnectionError(f"{exc} (gave up after retrying for {waited:.0f} s)")


def _capacity(detail: str) -> str:
    found = re.search(r"(\d+)\s*/\s*(\d+) sessions", detail)
    return f"{found.group(1)}/{found.group(2)} sessions in use" if found else "no free session"


def resilient(client_factory: Callable[..., Any], **kwargs: Any) -> ResilientClient:
    """A blocking client of `client_factory` (an OpenEnv `EnvClient` class) that rides out waking, full and
    dropped servers; keyword arguments are the wrapper's (see `ResilientClient`) or the client's (base_url...)."""
    return ResilientClient(client_factory, **kwargs)
