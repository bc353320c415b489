"""Serve an OpenReward (ORS) environment on 127.0.0.1 and point the `openreward` SDK at it.

The SDK is built for the hosted catalog: given a URL it talks to `api.<host>` and
`sessions.<host>`. For a local (or single-host self-hosted) server both must be the server's own
URL, the SDK wants *some* API key, and its PyPI update check should stay quiet offline. This
module sets exactly those variables and puts the old values back when you are done:

    with LocalORSServer("calculator_env.server:app") as ors:      # starts the server
        spec = OpenRewardSpec(ors.url, num_tasks=64)             # TRL talks to it

    ors = LocalORSServer(base_url="http://my-host:8080").start()  # use a running server instead

For the hosted catalog use none of this: `OpenRewardSpec("Org/Env")` with OPENREWARD_API_KEY set.
"""

from __future__ import annotations

import contextlib
import os

from helpers.compute.processes import one_server
from helpers.servers import LocalServer, check_reachable

DEFAULT_APP = "calculator_env.server:app"
# What the SDK reads (openreward/client.py): the two service URLs, the key, the update check.
SDK_URL_VARS = ("OPENREWARD_API_URL", "OPENREWARD_SESSION_URL")
LOCAL_API_KEY = "local-no-key-needed"


@contextlib.contextmanager
def sdk_pointed_at(url: str):
    """Within the block, `openreward.OpenReward(base_url=url)` reaches `url` itself; restored after.

    An OPENREWARD_API_KEY already set is kept (a self-hosted server may check it); otherwise a
    placeholder is set, since a local server checks none.
    """
    url = url.rstrip("/")
    wanted = {var: url for var in SDK_URL_VARS}
    wanted["OPENREWARD_API_KEY"] = os.environ.get("OPENREWARD_API_KEY") or LOCAL_API_KEY
    wanted["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
    saved = {var: os.environ.get(var) for var in wanted}
    os.environ.update(wanted)
    try:
        yield url
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


class LocalORSServer:
    """An ORS server on 127.0.0.1 (or one you already run, via `base_url`) + the SDK pointed at it.

    Args:
        app: "module:attribute" of the ORS server's ASGI app (`Server([Env]).app`).
        base_url: a running ORS server to use instead of starting one (checked on start).
        name: used in messages and the log file name.
        log_dir: where the server log goes (default: a temporary folder).
    """

    def __init__(self, app: str = DEFAULT_APP, *, base_url: str | None = None, name: str | None = None,
                 log_dir: str | os.PathLike | None = None):
        self.app = app
        self.given_url = base_url.rstrip("/") if base_url else None
        self.server = None if base_url else LocalServer(
            app, name=name or app.split(".")[0], health_path="/health", log_dir=log_dir,
            env={"OPENREWARD_DISABLE_UPDATE_CHECK": "1"})
        self._sdk_env = None

    @property
    def url(self) -> str:
        return self.given_url or self.server.base_url

    @property
    def started_locally(self) -> bool:
        return self.server is not None

    def start(self) -> "LocalORSServer":
        if self.server is not None:
            self.server.start()
        else:
            check_reachable(self.given_url, "/health")
        if self._sdk_env is None:
            self._sdk_env = sdk_pointed_at(self.url)
            self._sdk_env.__enter__()
        return self

    def stop(self) -> None:
        """Restore the SDK variables and stop the server if this object started it."""
        if self._sdk_env is not None:
            self._sdk_env.__exit__(None, None, None)
            self._sdk_env = None
        if self.server is not None:
            self.server.stop()

    def log_tail(self, lines: int = 40) -> str:
        return self.server.log_tail(lines) if self.server else "(server not started here: no local log)"

    def __enter__(self) -> "LocalORSServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = "started here" if self.server else "given"
        return f"<LocalORSServer {self.app if self.server else ''} at {self.url} ({where})>"


def _start_local(app: str) -> tuple[str, LocalORSServer]:
    ors = LocalORSServer(app).start()
    return ors.url, ors


def open_ors_target(target: str | None, app: str = DEFAULT_APP) -> tuple[str, LocalORSServer | None]:
    """What `OpenRewardSpec` should be given, and the server handle to stop later (or None).

        None                  start `app` on 127.0.0.1 (offline default)
        "http://host:port"    a self-hosted ORS server you run (checked now)
        "Org/Env"             the hosted OpenReward catalog (needs OPENREWARD_API_KEY and a network)

    Several processes (`accelerate launch`), target None: the main process starts the server, the others point
    their SDK at it (their handle is a given URL's: `stop()` restores their variables only).
    """
    if target is None:
        url, ors = one_server(_start_local, app)
        if ors is None:   # another process: the main one's server
            ors = LocalORSServer(base_url=url).start()
        return url, ors
    if "://" in target:
        ors = LocalORSServer(base_url=target).start()
        return ors.url, ors
    if target.count("/") != 1 or not all(target.split("/")):
        raise ValueError(f"ORS_TARGET={target!r} is neither a URL (http://host:port) nor a catalog name "
                         f"like 'Eigent/SETA'. Leave it None to start the local calculator_env server.")
    if not os.environ.get("OPENREWARD_API_KEY"):
        raise ValueError(f"ORS_TARGET={target!r} is an OpenReward catalog name, which needs OPENREWARD_API_KEY "
                         f"(get one at https://openreward.ai) and a network. Set it, or leave ORS_TARGET None "
                         f"to train against the local calculator_env server.")
    return target, None


def describe_target(target: str, ors: LocalORSServer | None) -> None:
    """Print where `OpenRewardSpec` will connect and the `OPENREWARD_*` variables the SDK reads (notebook 04's
    check that the helper pointed the SDK at the local server, or left the catalog's variables alone)."""
    local = ors is not None and ors.started_locally
    print("ORS target:", target, f"(local calculator_env server; its log: {ors.server.log_path})" if local else "")
    for var in ("OPENREWARD_API_URL", "OPENREWARD_SESSION_URL", "OPENREWARD_DISABLE_UPDATE_CHECK"):
        print(f"  {var} = {os.environ.get(var)}")


def check_splits(target: str, eval_split: str, *, env_name: str = "CalculatorEnv") -> None:
    """A ValueError naming the knob if the ORS environment at `target` lacks the split `train` (what the spec
    trains on) or `eval_split` (the held-out evaluation), so a wrong EVAL_SPLIT stops before anything slow.
    Returns nothing (a notebook cell ending with it shows nothing).

    `target`: a URL (a single-environment server: `env_name` reaches its only environment) or a catalog name."""
    from openreward import OpenReward

    client = OpenReward(base_url=target) if "://" in target else OpenReward()
    try:
        splits = client.environments.get(env_name if "://" in target else target).list_splits()
    finally:
        client.close()
    if eval_split not in splits or "train" not in splits:
        raise ValueError(f"{target} has the splits {splits}: training reads 'train' and EVAL_SPLIT={eval_split!r} "
                         f"must be one of them. Set EVAL_SPLIT to a held-out split it has.")
