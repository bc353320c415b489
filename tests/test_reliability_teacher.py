"""Teacher endpoint faults for notebook 02 (refused, slow, garbage, wrong shape, failing mid-run).

The teacher is a real HTTP server (tests/fault_apps.py, served with LocalServer) that misbehaves
on purpose; the data collection is the real `openenv collect` CLI, run with notebook 02's own command
line (its cell tagged collect-command) through helpers.chain_sum.sft_data.run_collect. What must hold: the
pre-flight check (`check_teacher`) turns every fault into a `TeacherError` naming the URL within its
timeout, and a teacher failing mid-collection costs only the episodes it failed: the ones collected
are kept, and `--resume` fills in the rest once the teacher is back.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from helpers.prompts import CHAIN_SUM_CONFIG, SYSTEM_PROMPT
from helpers.servers import LocalServer, free_port
from helpers.chain_sum.sft_data import Teacher, TeacherError, check_teacher, load_results, run_collect
from tools.notebooks import NOTEBOOKS_DIR, load_cells

QUESTION = "State the final answer to the following arithmetic problem: 12 + 30 ="


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    with LocalServer("tests.fault_apps:create_app", factory=True, name="broken_teacher",
                     env={"FAULT_DELAY": "60", "FAULT_GOOD_REPLIES": "3"},
                     log_dir=tmp_path_factory.mktemp("teacher-logs")) as server:
        yield server


def check(url: str, model: str, timeout: float = 5.0) -> dict:
    return check_teacher(Teacher.endpoint(url, model), system_prompt=SYSTEM_PROMPT, question=QUESTION,
                         timeout=timeout)


def test_refused_is_a_teacher_error_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(TeacherError, match=f"No teacher answers at {url}"):
        check(url, "any")
    assert time.monotonic() - start < 30


def test_slow_teacher_is_a_teacher_error_within_the_timeout(broken):
    start = time.monotonic()
    with pytest.raises(TeacherError, match=broken.base_url):
        check(broken.base_url, "slow", timeout=2.0)
    assert time.monotonic() - start < 10  # the teacher would have taken 60 s


def test_garbage_reply_is_a_teacher_error(broken):
    start = time.monotonic()
    with pytest.raises(TeacherError, match=broken.base_url):
        check(broken.base_url, "garbage")
    assert time.monotonic() - start < 10


def test_reply_that_is_not_a_chat_completion_is_a_teacher_error(broken):
    with pytest.raises(TeacherError, match=broken.base_url):
        check(broken.base_url, "wrong")


def test_teacher_failing_mid_collection_keeps_collected_episodes_and_resume_completes(
        broken, rg_server, tmp_path):
    out = tmp_path / "rollouts"

    def collect(teacher: Teacher):
        cmd = load_cells(NOTEBOOKS_DIR / "02_sft_warmup.ipynb", "collect-command", namespace=dict(
            env_url=rg_server.base_url, teacher=teacher, TEACHER_MAX_TOKENS=1024,
            settings=SimpleNamespace(n_episodes=6, dataset_config=CHAIN_SUM_CONFIG),
            SYSTEM_PROMPT=SYSTEM_PROMPT, rollouts_dir=out, PUSH_TO_HUB=False,
            HUB_DATASET_ID=None))["collect_cmd"]
        return run_collect(cmd, out, n_episodes=6, progress=False, timeout=300)

    # three good replies, then HTTP 500 for good
    first = collect(Teacher.endpoint(broken.base_url, "flaky"))
    assert (first.collected, first.failed, first.in_file) == (3, 3, 3), first
    assert "500" in first.output or "overloaded" in first.output, first.output[-2000:]
    kept = (out / "results.jsonl").read_text().splitlines()
    assert all(r["reward"] == 1.0 for r in load_results(out))  # a no-mistake teacher's episodes

    # the teacher is back (the real local one): resume keeps the three and collects the rest
    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher",
                     env={"TEACHER_MISTAKE_RATE": "0"}, log_dir=tmp_path / "logs") as teacher:
        second = collect(Teacher.endpoint(teacher.base_url, "chain-sum-teacher"))
    assert (second.skipped, second.collected, second.in_file) == (3, 3, 6), second
    lines = (out / "results.jsonl").read_text().splitlines()
    assert lines[:3] == kept  # the episodes collected before the fault are untouched
    assert len({r["episode_id"] for r in load_results(out)}) == 6


def test_a_bug_is_not_reported_as_a_teacher_fault(monkeypatch):
    """Only a reply of the wrong shape (openenv's client failing to read its fields) is "not a chat
    completion"; an AttributeError anywhere else is a bug and surfaces as itself."""
    import helpers.chain_sum.sft_data as sft_data

    class BuggyClient:
        base_url = "http://127.0.0.1:1"

        async def complete_with_tools(self, messages, tools):
            return None.content  # a bug in the client code, not in the teacher's reply

    monkeypatch.setattr(sft_data, "_llm_client", lambda *args: BuggyClient())
    with pytest.raises(AttributeError, match="content"):
        check("http://127.0.0.1:1", "any")


def test_collect_through_dropped_connections_scores_only_whole_episodes_and_resume_completes(rg_server, tmp_path):
    """`openenv collect` (notebook 02's own command) against an environment whose WebSocket drops every few frames:
    an episode cut off is counted failed and kept out of results.jsonl, every kept episode carries the
    environment's own reward, and --resume completes the rest once the connection holds."""
    from tests.fault_proxy import FaultProxy

    out = tmp_path / "rollouts"
    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher",
                     env={"TEACHER_MISTAKE_RATE": "0"}, log_dir=tmp_path / "logs") as teacher_server, \
            FaultProxy(rg_server.base_url) as proxy:
        teacher = Teacher.endpoint(teacher_server.base_url, "chain-sum-teacher")

        def collect():
            cmd = load_cells(NOTEBOOKS_DIR / "02_sft_warmup.ipynb", "collect-command", namespace=dict(
                env_url=proxy.url, teacher=teacher, TEACHER_MAX_TOKENS=1024,
                settings=SimpleNamespace(n_episodes=8, dataset_config=CHAIN_SUM_CONFIG),
                SYSTEM_PROMPT=SYSTEM_PROMPT, rollouts_dir=out, PUSH_TO_HUB=False,
                HUB_DATASET_ID=None))["collect_cmd"]
            return run_collect(cmd, out, n_episodes=8, progress=False, timeout=300)

        proxy.drop_every = 3
        first = collect()
        assert proxy.stats["dropped"] > 0 and first.failed > 0, (first, proxy.stats)
        kept = load_results(out)
        assert first.in_file == len(kept) == first.collected < 8, first
        assert all(r["reward"] == 1.0 for r in kept)   # only whole episodes, scored by the environment
        proxy.drop_every = 0
        second = collect()
    assert second.in_file == 8 and len({r["episode_id"] for r in load_results(out)}) == 8, second
    assert all(r["reward"] == 1.0 for r in load_results(out))
