"""The echo environment over a real local server: async client, `.sync()` wrapper, MCP view."""

from __future__ import annotations

import asyncio

import pytest

from helpers.servers import LocalServer


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    with LocalServer("echo_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "4"},
                     name="echo", log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server


def test_async_client_echoes_and_rewards_length(echo_server):
    from echo_env import EchoAction, EchoEnv

    async def episode():
        async with EchoEnv(base_url=echo_server.base_url) as env:
            reset = await env.reset()
            first = await env.step(EchoAction(message="Hello, OpenEnv!"))
            second = await env.step(EchoAction(message="hi"))
            state = await env.state()
            return reset, first, second, state

    reset, first, second, state = asyncio.run(episode())
    assert reset.observation.echoed_message == "Echo environment ready!" and not reset.done
    assert first.observation.echoed_message == "Hello, OpenEnv!"
    assert first.observation.message_length == 15
    assert first.reward == pytest.approx(1.5) and not first.done
    assert second.reward == pytest.approx(0.2)
    assert state.step_count == 2 and state.episode_id


def test_sync_wrapper_and_separate_sessions(echo_server):
    from echo_env import EchoAction, EchoEnv

    with EchoEnv(base_url=echo_server.base_url).sync() as a, \
         EchoEnv(base_url=echo_server.base_url).sync() as b:
        a.reset()
        b.reset()
        a.step(EchoAction(message="one"))
        a.step({"message": "two"})  # a plain dict is accepted too
        result = b.step(EchoAction(message=""))
        assert result.observation.echoed_message == "" and result.reward == 0.0
        assert a.state().step_count == 2 and b.state().step_count == 1
        assert a.state().episode_id != b.state().episode_id


def test_bad_action_is_refused_and_session_survives(echo_server):
    from echo_env import EchoAction, EchoEnv

    with EchoEnv(base_url=echo_server.base_url).sync() as env:
        env.reset()
        with pytest.raises(ValueError, match="text\n  Extra inputs are not permitted"):  # pydantic refuses it in the client
            env.step({"text": "wrong field"})
        assert env.step(EchoAction(message="ok")).observation.echoed_message == "ok"


def test_mcp_view_lists_and_calls_tools(echo_server):
    from echo_env import EchoMCPEnv

    async def mcp():
        async with EchoMCPEnv(base_url=echo_server.base_url) as env:
            tools = await env.list_tools()
            echoed = await env.call_tool("echo_message", message="over MCP")
            with_length = await env.call_tool("echo_with_length", message="four")
            return tools, echoed, with_length

    tools, echoed, with_length = asyncio.run(mcp())
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"echo_message", "echo_with_length"}
    assert by_name["echo_message"].input_schema["required"] == ["message"]
    assert "Echo" in by_name["echo_message"].description
    assert echoed == "over MCP"
    assert with_length == {"message": "four", "length": 4}


def test_mcp_sync_wrapper_and_unknown_tool(echo_server):
    from echo_env import EchoMCPEnv

    with EchoMCPEnv(base_url=echo_server.base_url).sync() as env:
        assert [t.name for t in env.list_tools()] == ["echo_message", "echo_with_length"]
        assert env.call_tool("echo_message", message="sync") == "sync"
        with pytest.raises(RuntimeError, match="nope"):
            env.call_tool("nope", message="x")


def test_max_concurrent_envs_is_read_from_the_environment(monkeypatch):
    from echo_env.server.app import max_concurrent_envs_from_env

    monkeypatch.setenv("MAX_CONCURRENT_ENVS", "7")
    assert max_concurrent_envs_from_env() == 7
    monkeypatch.setenv("MAX_CONCURRENT_ENVS", "zero")
    with pytest.raises(ValueError, match="MAX_CONCURRENT_ENVS"):
        max_concurrent_envs_from_env()


def test_every_route_refuses_a_message_over_the_limit_with_a_short_reply(echo_server):
    """`/ws` refused messages over MAX_MESSAGE_CHARS, but HTTP `/mcp` called the tool anyway: a
    15 MiB `tools/call` came back as a 47 MB reply. Now the tools enforce the limit on every route
    (HTTP `/mcp`, WebSocket `/mcp`, `/ws` steps in MCP form) and the refusal quotes only a prefix."""
    import json

    import httpx
    from websockets.sync.client import connect

    from echo_env import EchoMCPEnv
    from echo_env.models import MAX_MESSAGE_CHARS

    big = "z" * (15 * 1024 * 1024)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo_message", "arguments": {"message": big}}}
    http = httpx.post(echo_server.base_url + "/mcp", json=call, timeout=60)
    with connect(echo_server.base_url.replace("http://", "ws://") + "/mcp", max_size=None) as ws:
        ws.send(json.dumps(call))
        over_ws = ws.recv()
    for reply in (http.text, over_ws):
        error = json.loads(reply)["error"]
        assert len(reply) < 1_000 and f"at most {MAX_MESSAGE_CHARS:,} characters" in error["message"], reply[:300]
        assert "15,728,640 characters" in error["message"]
    with EchoMCPEnv(base_url=echo_server.base_url).sync() as env:
        with pytest.raises(RuntimeError, match="at most 100,000 characters"):
            env.call_tool("echo_with_length", message="q" * (MAX_MESSAGE_CHARS + 1))
        assert env.call_tool("echo_message", message="q" * MAX_MESSAGE_CHARS) == "q" * MAX_MESSAGE_CHARS
