"""ORS sessions that ride out what hosted environments do, for TRL's `OpenRewardSpec` (notebook 04).

    spec = OpenRewardSpec(target, num_tasks=64)
    trainer = GRPOTrainer(..., environment_factory=resilient_sessions(spec))   # instead of spec.environment_factory
    resilient_sessions(spec).stats   # rollouts, scored, retried, failed, reconnects, waited_s (also in TOTALS)

TRL 1.16's adapter (`trl.experimental.openreward.environment._RolloutEnvironment`) opens one ORS session per
rollout through the `openreward` SDK: `reset` = POST /create_session (SSE) + POST /create + GET /prompt, each
tool call = POST /call (SSE). The session lives on the server, keyed by its id, not on a connection. The SDK
retries by itself: a plain request three times over about 3 s (502/503/504, 429 or a lost connection), an SSE
request up to 5 times, and a /call whose connection drops after the server's first event (`task_id`) is
resumed: the server sends the result of the one run. TRL's adapter turns every exception of a tool call into
"Error: ..." text for the model. What that leaves, and what this wrapper does:

| fault                                  | SDK + TRL alone                      | with `resilient_sessions`             |
|----------------------------------------|--------------------------------------|---------------------------------------|
| a Space waking or restarting (502/503/ | `reset` raises after the SDK's       | retried with backoff for up to        |
| 504) when a rollout opens its session  | ~3.5 s of retries: training stops    | `wake_timeout_s` (180 s), announced   |
|                                        |                                      | once; then a `ConnectionError`        |
| connection refused (nothing listening) | `reset` raises                       | retried for `refused_timeout_s` (5 s) |
| the reply to /create lost after the    | the SDK sends it again: 400 "Session | a new session, up to                  |
| server made the session                | already exists"; `reset` raises      | `max_reconnects` (3) times            |
| a /call's reply lost after the tool    | the SDK sends the call again on the  | the session is reopened and the       |
| ran, before the server's first event   | same session: the tool runs twice. A | episode replayed (below), else        |
|                                        | repeated `answer` is refused         | failed                                |
|                                        | (episode_finished): its reward is    |                                       |
|                                        | lost, scored as none                 |                                       |
| the session gone (server restarted or  | every later call of the episode is   | the same: reopened and replayed,      |
| reaped: 404 "Active environment not    | an error; the reward stays as it was | else failed                           |
| found", 410), or lost past the SDK's   |                                      |                                       |
| retries                                |                                      |                                       |
| a tool raising on the server, a bad    | error text to the model              | unchanged: repeating fails the        |
| argument, a call after `finished`      |                                      | same way                              |

Reopening means a new session for the same task (`reset` with the same dataset row, whose prompt must match)
on which the episode's earlier tool calls are sent again in order, each result compared with the one seen
the first time, before the lost call is sent. Whether that is safe depends on the environment's tools:

| environment    | tool               | effect of repeating it on a new session           | after a loss             |
|----------------|--------------------|---------------------------------------------------|--------------------------|
| calculator_env | calculate(expr)    | pure given the task; counts toward the episode's  | replayed in order (the   |
|                |                    | MAX_CALCULATIONS (5), which the replay rebuilds   | count comes out the same)|
| calculator_env | answer(answer)     | grades and finishes: pure given the task          | resent once replayed     |
| any other      | any                | unknown (a SETA tool runs shell commands in a     | never replayed: the      |
|                |                    | sandbox; repeating may not rebuild its state)     | episode is failed        |

The environment is named by what the server lists at /list_environments (a URL target: the first, which
an `OpenRewardSpec` without `env_name` reaches) or by the catalog name; `RULES` maps names to rules. A
failed episode is counted (`stats.failed`), its `reward` is set to 0.0 (never the last reward seen before the
loss) and `finished` to True; its later tool calls answer with the reason without reaching the server, and
the next `reset` starts over. A server gone for good fails the episode under way (about 35 s of retries, the SDK's
and these) and ends training at the next reset with `EnvironmentUnavailable` (a `ConnectionError`) naming it.

Not covered: the SDK itself sends a /call again when its reply is lost before the server's first event, so a
`calculate` may run twice on the session (same answer, one more towards its 5); nothing on the client shows it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from helpers.servers import ServerError, check_reachable
from helpers.servers.resilient import TOTALS, EpisodeFailed, Patience, ResilienceStats, _span, announce, settled

__all__ = ["resilient_sessions", "ORSReplayRule", "RULES", "classify_ors", "EpisodeFailed", "EnvironmentUnavailable"]


@dataclass(frozen=True)
class ORSReplayRule:
    """Which tools of one ORS environment may be sent again, in order, on a new session (module docstring)."""

    name: str
    replayable_tools: frozenset


RULES = {
    "calculatorenv": ORSReplayRule("calculator_env", frozenset({"calculate", "answer"})),
}
NO_REPLAY = ORSReplayRule("this environment", frozenset())


def classify_ors(exc: BaseException) -> tuple[str | None, str]:
    """(kind, detail) of an exception from the openreward SDK: "waking", "refused", "lost" (the connection or
    the call's result), "gone" (the session), "finished" (a call refused because the episode already finished)
    or None (not a fault: raise it)."""
    import aiohttp
    from openreward.api.errors import (HeartbeatTimeoutError, MaxRetriesError, SessionTerminatedError,
                                       ToolCallError, ToolFailed)

    if isinstance(exc, MaxRetriesError) and exc.errors:
        kind, detail = classify_ors(exc.errors[-1])
        return (kind or "lost"), detail
    if isinstance(exc, ToolCallError):   # episode_finished: a resent call whose first run had finished it
        if exc.reason == "episode_finished":
            return "finished", "the reply was lost and the call, sent again, refused: the episode had finished"
        return None, str(exc)
    if isinstance(exc, ToolFailed):   # the server's tool raised, or it no longer knows the call it was resuming
        return ("gone", str(exc)) if "unknown task_id" in str(exc) else (None, str(exc))
    if isinstance(exc, SessionTerminatedError):
        return "gone", str(exc)
    if isinstance(exc, aiohttp.ClientResponseError):
        if exc.status in (502, 503, 504):
            return "waking", str(exc.status)
        if exc.status == 410 or (exc.status == 404 and "environment not found" in str(exc.message).lower()):
            return "gone", f"{exc.status} {exc.message}"
        if exc.status == 400 and "session already exists" in str(exc.message).lower():
            return "lost", "the reply to /create was lost and the call, sent again, refused: session already exists"
        return None, f"HTTP {exc.status}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if getattr(exc, "os_error", None) is not None and exc.os_error.errno == errno.ECONNREFUSED:
            return "refused", "connection refused"
        return "lost", str(exc)
    if isinstance(exc, (aiohttp.ClientError, HeartbeatTimeoutError, asyncio.TimeoutError, TimeoutError,
                        ConnectionError, MaxRetriesError)):
        return "lost", str(exc) or type(exc).__name__
    return None, str(exc)


class _Guard:
    """Stands in for the SDK session on TRL's adapter: its tool calls go through `_ors_call`."""

    def __init__(self, rollout):
        self._rollout = rollout

    def call_tool(self, tool_name: str, input: dict) -> Any:  # noqa: A002 - the SDK's name
        return self._rollout._ors_call(tool_name, input)

    def __getattr__(self, name: str) -> Any:
        live = self._rollout._ors_live
        if live is None:
            raise AttributeError(name)
        return getattr(live, name)


class _ReplayMismatch(Exception):
    pass


class EnvironmentUnavailable(ConnectionError):
    """No new session could be opened within the limits: the server is gone or still asleep."""


def _fingerprint(out: Any) -> tuple:
    blocks = tuple((getattr(b, "type", None), getattr(b, "text", None)) for b in (out.blocks or []))
    return blocks, out.reward, bool(out.finished)


class _Resilient:
    """Mixed into the class of each adapter TRL's factory builds (see `resilient_sessions`). It overrides only
    `reset` and the private `_call_ors_tool`: no public method, so TRL offers the model the same tools."""

    _ors_opts: dict = {}   # set on each generated subclass: url, rule, stats, timeouts, out

    def reset(self, **row: Any) -> str:
        self._ors_row, self._ors_journal, self._ors_failed, self._ors_env_ended = dict(row), [], None, False
        prompt = self._ors_open()
        self._ors_prompt = prompt
        self._ors_add(rollouts=1)
        return prompt

    def _call_ors_tool(self, tool_name: str, tool_input: dict) -> str:
        text = super()._call_ors_tool(tool_name, tool_input)   # TRL books the result (or the error text)
        if getattr(self, "_ors_failed", None):
            self.reward, self.finished = 0.0, True     # never scored from a broken episode
        return text

    # -- machinery --

    def _ors_add(self, **counts) -> None:
        self._ors_opts["stats"].add(**counts)
        TOTALS.add(**counts)

    def _ors_open(self) -> str:
        """TRL's reset (close the old session, open one for the row, read its prompt) through waking, refused
        and lost connections; afterwards the adapter's session is the guard."""
        o = self._ors_opts
        patience = Patience()
        lost, faulted = 0, False
        while True:
            self._ors_live = None
            attempt = time.monotonic()
            try:
                prompt = super().reset(**self._ors_row)
            except Exception as exc:  # noqa: BLE001 - classified; anything else is raised unchanged
                kind, detail = classify_ors(exc)
                if kind is None:
                    raise
                faulted = True
                if kind not in ("waking", "refused"):
                    lost += 1
                    if lost > o["max_reconnects"]:
                        raise EnvironmentUnavailable(f"environment at {o['url']}: a new session failed {lost} "
                                                     f"times ({detail}).") from exc
                    self._ors_add(reconnects=1)
                    continue
                pause, waited = patience.next_pause(kind, o["wake_timeout_s"] if kind == "waking"
                                                    else o["refused_timeout_s"])
                if pause is None:
                    raise self._ors_gave_up(kind, detail, waited) from exc
                if kind == "waking":
                    announce(o["url"], "waking", f"environment at {o['url']} is starting ({detail}); retrying "
                                                 f"for up to {_span(o['wake_timeout_s'])}", o["out"])
                time.sleep(pause)   # waited: the SDK's own retries in this attempt, and this pause
                self._ors_add(waited_s=time.monotonic() - attempt, reconnects=1)
                continue
            self._ors_live, self._session = self._session, _Guard(self)
            if faulted:
                settled(o["url"])
            return prompt

    def _ors_call(self, tool_name: str, tool_input: dict) -> Any:
        """One tool call on the live session; after a loss, a new session with the episode replayed first."""
        from openreward.api.errors import ToolFailed

        o = self._ors_opts
        if self._ors_failed:
            raise EpisodeFailed(self._ors_failed)
        if self._ors_live is None:
            raise RuntimeError("Cannot call a tool before reset() opens a session.")
        if self._ors_env_ended:    # a tool raised on the server, which ended the session: as TRL would have it
            return self._ors_live.call_tool(tool_name, tool_input)
        lost, reopen, reopened = 0, False, False
        while True:
            if reopen:
                try:
                    self._ors_reopen()
                except (_ReplayMismatch, EnvironmentUnavailable) as exc:
                    raise self._ors_fail(str(exc)) from exc
                except Exception as exc:  # noqa: BLE001
                    kind, detail = classify_ors(exc)
                    if kind is None:      # a replayed call failed where it had worked: not the same episode
                        raise self._ors_fail(f"the replay failed: {detail}") from exc
                    lost += 1             # the replay itself was cut: another try, counted
                    if lost > o["max_reconnects"]:
                        raise self._ors_fail(f"lost {lost} times; {detail}") from exc
                    continue
                reopen, reopened = False, True
            try:
                out = self._ors_live.call_tool(tool_name, tool_input)
            except Exception as exc:  # noqa: BLE001 - classified; anything else goes back to TRL unchanged
                kind, detail = classify_ors(exc)
                if kind == "finished" and self.finished:
                    kind = None        # a call after the episode's own end: the model's doing, not a fault
                if kind is None:
                    if isinstance(exc, ToolFailed):
                        self._ors_env_ended = True
                    raise
                lost += 1
                tools = {name for name, _, _ in self._ors_journal} | {tool_name}
                if not tools <= o["rule"].replayable_tools:
                    raise self._ors_fail(f"{detail}; the calls of {o['rule'].name} are not replayed") from exc
                if lost > o["max_reconnects"]:
                    raise self._ors_fail(f"lost {lost} times; {detail}") from exc
                reopen = True
                continue
            if reopened:
                self._ors_add(retried=1)
            self._ors_journal.append((tool_name, dict(tool_input), _fingerprint(out)))
            if out.finished:
                self._ors_add(scored=1)
            return out

    def _ors_reopen(self) -> None:
        """A new session for the same task with the episode's calls replayed, each result checked."""
        saved = (self.reward, list(self.rewards), list(self.metadata), self.finished, self.last_output)
        prompt = self._ors_open()   # TRL's reset clears the episode's bookkeeping: put it back
        self.reward, self.rewards, self.metadata, self.finished, self.last_output = saved
        self._ors_add(reconnects=1)
        if prompt != self._ors_prompt:
            raise _ReplayMismatch("the reopened task's prompt differs from the first one")
        for name, tool_input, fingerprint in self._ors_journal:
            if _fingerprint(self._ors_live.call_tool(name, tool_input)) != fingerprint:
                raise _ReplayMismatch(f"the replayed {name} answered differently from the first time")

    def _ors_fail(self, why: str) -> EpisodeFailed:
        url = self._ors_opts["url"]
        self._ors_failed = (f"environment at {url}: the session was lost during this episode and it cannot be "
                            f"replayed ({why}); the episode is counted as failed and gets no reward.")
        self.reward, self.finished = 0.0, True
        self._ors_add(failed=1)
        self._teardown_session()        # whatever that session holds is not the episode's state
        self._ors_live, self._session = None, _Guard(self)   # later calls answer with the reason
        return EpisodeFailed(self._ors_failed)

    def _ors_gave_up(self, kind: str, detail: str, waited: float) -> EnvironmentUnavailable:
        url = self._ors_opts["url"]
        settled(url)
        if kind == "waking":
            return EnvironmentUnavailable(
                f"environment at {url} still answers {detail} after {waited:.0f} s of retrying: the Space may be "
                f"failing to start or paused. Open it in a browser to see its state and logs, or leave ORS_TARGET "
                f"None to start the local calculator_env server.")
        return EnvironmentUnavailable(f"environment at {url}: {detail} (gave up after retrying for {waited:.0f} s)")


def _environment_key(target: str, env_name: str | None, wake_timeout_s: float, out: Callable[[str], None]) -> str:
    """The name `RULES` is keyed by: the server's environment (a URL target) or the catalog name."""
    if "://" not in target:
        return target.lower()
    if env_name:
        return env_name.lower()
    url = target.rstrip("/") + "/list_environments"
    try:
        check_reachable(target, "/list_environments", wake_timeout_s=wake_timeout_s, out=out)   # a waking Space
        with urllib.request.urlopen(url, timeout=10) as resp:
            names = json.loads(resp.read())
    except (ServerError, OSError, ValueError):
        return ""   # unknown: nothing is replayed
    return str(names[0]).lower() if names else ""


def resilient_sessions(spec: Any, *, wake_timeout_s: float = 180.0, refused_timeout_s: float = 5.0,
                       max_reconnects: int = 3, rule: ORSReplayRule | None = None,
                       out: Callable[[str], None] = print) -> Callable[[], Any]:
    """`spec.environment_factory` (a TRL `OpenRewardSpec`'s), each adapter riding out waking servers, lost
    replies and lost sessions (module docstring). Its `stats` count this factory's episodes; `TOTALS` all."""
    make = spec.environment_factory
    target = spec._target   # TRL keeps the target it was given here (trl 1.16)
    url = target.rstrip("/") if "://" in target else target
    if rule is None:
        key = _environment_key(target, getattr(spec, "_env_name", None), wake_timeout_s, out)
        rule = RULES.get(key, NO_REPLAY)
    opts = {"url": url, "rule": rule, "stats": ResilienceStats(), "wake_timeout_s": wake_timeout_s,
            "refused_timeout_s": refused_timeout_s, "max_reconnects": max_reconnects, "out": out}
    classes: dict = {}

    def factory() -> Any:
        environment = make()
        base = type(environment)
        if base not in classes:
            classes[base] = type(f"Resilient{base.__name__}", (_Resilient, base), {"_ors_opts": opts})
        environment.__class__ = classes[base]   # same object, same tools; `reset` and tool calls go through here
        environment._ors_live, environment._ors_failed, environment._ors_env_ended = None, None, False
        environment._ors_journal = []
        return environment

    factory.stats = opts["stats"]
    factory.rule = rule
    factory.__name__ = factory.__qualname__ = "resilient_sessions"
    return factory
