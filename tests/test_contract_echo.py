"""echo wire contract with upstream OpenEnv (envs/echo_env of huggingface/OpenEnv, read at commits
685de411 and 385de5eb, unchanged between them: MCP-only, action CallToolAction / ListToolsAction, reset
a bare Observation), both directions over the real WebSocket: our EchoEnv against a stand-in upstream
server (tests/upstream_apps.py), and upstream's client (openenv's MCPToolClient, which upstream's EchoEnv
is) against our server. Opt-in, with OPENENV_UPSTREAM naming checkouts of huggingface/OpenEnv: upstream's
own server and client (with upstream's openenv core) from each checkout, both ways. Also: the
WebSocketGuard copies shipped in each env package stay identical."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.mcp_client import MCPToolClient

from echo_env import EchoAction, EchoEnv
from helpers.servers import LocalServer
from upstream_apps import run_upstream_client, snapshot_env, snapshot_params

ENVS = Path(__file__).resolve().parents[1] / "envs"


@pytest.fixture(scope="module")
def upstream_echo(tmp_path_factory):
    with LocalServer("tests.upstream_apps:echo_app", factory=True, name="upstream-echo",
                     log_dir=tmp_path_factory.mktemp("upstream-echo")) as server:
        yield server


@pytest.fixture(scope="module")
def our_echo(tmp_path_factory):
    with LocalServer("echo_env.server.app:app", name="echo", log_dir=tmp_path_factory.mktemp("echo")) as server:
        yield server


@pytest.mark.parametrize("which", ["upstream", "ours"])
def test_our_client_echoes_and_scores_the_same_on_both_servers(which, upstream_echo, our_echo):
    server = upstream_echo if which == "upstream" else our_echo
    with EchoEnv(base_url=server.base_url).sync() as env:
        assert env.reset().observation.echoed_message == "Echo environment ready!"
        result = env.step(EchoAction(message="Hello, OpenEnv!"))
        assert result.observation.echoed_message == "Hello, OpenEnv!" and result.observation.message_length == 15
        assert result.reward == pytest.approx(1.5) and result.done is False
        result = env.step(EchoAction(type="call_tool", tool_name="echo_with_length", arguments={"message": "Hi"}))
        assert result.observation.echoed_message == "Hi"
        with pytest.raises(RuntimeError, match="tool 'nope' failed"):
            env.step(EchoAction(type="call_tool", tool_name="nope", arguments={}))


@pytest.mark.parametrize("which", ["upstream", "ours"])
def test_upstreams_mcp_client_works_on_both_servers(which, upstream_echo, our_echo):
    server = upstream_echo if which == "upstream" else our_echo

    async def scenario():
        async with MCPToolClient(base_url=server.base_url) as client:
            await client.reset()
            names = sorted(t.name for t in await client.list_tools())
            echoed = await client.call_tool("echo_with_length", message="Test")
            # the WebSocket path upstream's client also uses: steps with MCP actions
            listed = await client.step(ListToolsAction())
            called = await client.step(CallToolAction(tool_name="echo_message", arguments={"message": "ws"}))
            return names, echoed, listed, called

    names, echoed, listed, called = asyncio.run(scenario())
    assert names == ["echo_message", "echo_with_length"]
    assert echoed == {"message": "Test", "length": 4}
    assert sorted(t.name for t in listed.observation.tools) == names
    assert called.observation.error is None
    assert called.observation.result["data"] == "ws"


def test_a_message_over_the_limit_is_refused(our_echo):
    from echo_env.models import MAX_MESSAGE_CHARS

    with EchoEnv(base_url=our_echo.base_url, max_message_size_mb=64).sync() as env:
        env.reset()
        with pytest.raises(ValueError, match=f"at most {MAX_MESSAGE_CHARS}"):
            env.step(EchoAction(message="x" * (MAX_MESSAGE_CHARS + 1)))
        assert env.step(EchoAction(message="ok")).observation.echoed_message == "ok"


def test_every_env_package_ships_the_same_websocket_guard():
    copies = {p.parent.parent.name: p.read_text() for p in ENVS.glob("*_env/server/wire_guard.py")}
    assert set(copies) == {"echo_env", "reasoning_gym_env", "textarena_env", "code_feedback_env"}
    assert len(set(copies.values())) == 1, "the wire_guard.py copies differ: keep them identical"
    for package in copies:
        assert "app.add_middleware(WebSocketGuard)" in (ENVS / package / "server" / "app.py").read_text()


def test_a_reset_whose_metadata_the_wire_stripped_reads_as_an_empty_greeting():
    """Upstream's server at 685de411 and 385de5eb (openenv `serialize_observation`) leaves `metadata` out of
    the wire, so its echo reset (a bare Observation whose greeting is in metadata) arrives as an
    empty observation. Our client must take that as a reset with no greeting, not fail."""
    env = EchoEnv(base_url="http://upstream.example:8000")
    result = env._parse_result({"observation": {}, "reward": 0.0, "done": False})
    assert result.observation.echoed_message == "" and result.reward == 0.0 and result.done is False


# -- upstream's own code, from checkouts named by OPENENV_UPSTREAM (skipped when unset) ----------------

UPSTREAM_CLIENT_SESSION = """
import asyncio, json, os
import echo_env, openenv
from echo_env import CallToolAction, EchoEnv, ListToolsAction

async def main():
    async with EchoEnv(base_url=os.environ["BASE_URL"]) as env:
        await env.reset()
        names = sorted(t.name for t in await env.list_tools())
        echoed = await env.call_tool("echo_with_length", message="Test")
        listed = await env.step(ListToolsAction())
        called = await env.step(CallToolAction(tool_name="echo_message", arguments={"message": "ws"}))
        return {"modules": [echo_env.__file__, openenv.__file__], "names": names, "echoed": echoed,
                "listed": sorted(t.name for t in listed.observation.tools), "error": called.observation.error,
                "data": called.observation.result["data"]}

print(json.dumps(asyncio.run(main())))
"""


@pytest.fixture(scope="module", params=snapshot_params())
def snapshot(request):
    return request.param


@pytest.fixture(scope="module")
def real_upstream_echo(snapshot, tmp_path_factory):
    with LocalServer("echo_env.server.app:app", env=snapshot_env(snapshot), name="real-upstream-echo",
                     log_dir=tmp_path_factory.mktemp("real-upstream-echo")) as server:
        yield server


def test_our_client_echoes_and_scores_on_upstreams_own_server(real_upstream_echo):
    with EchoEnv(base_url=real_upstream_echo.base_url).sync() as env:
        assert env.reset().observation.echoed_message == ""  # upstream's wire drops the greeting (metadata)
        result = env.step(EchoAction(message="Hello, OpenEnv!"))
        assert result.observation.echoed_message == "Hello, OpenEnv!" and result.observation.message_length == 15
        assert result.reward == pytest.approx(1.5) and result.done is False  # upstream sends none: our rule
        result = env.step(EchoAction(type="call_tool", tool_name="echo_with_length", arguments={"message": "Hi"}))
        assert result.observation.echoed_message == "Hi"
        with pytest.raises(RuntimeError, match="tool 'nope' failed"):
            env.step(EchoAction(type="call_tool", tool_name="nope", arguments={}))


def test_upstreams_own_client_works_on_our_server(snapshot, our_echo):
    out = run_upstream_client(snapshot, UPSTREAM_CLIENT_SESSION, our_echo.base_url)
    assert all(m.startswith(str(snapshot)) for m in out["modules"])  # upstream's client and core, not ours
    assert out["names"] == out["listed"] == ["echo_message", "echo_with_length"]
    assert out["echoed"] == {"message": "Test", "length": 4}
    assert out["error"] is None and out["data"] == "ws"
