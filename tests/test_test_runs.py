"""docs/guide.md's suite times are generated from docs/test-runs.json by tools/test_runs.py, and `add` reads a real
.ci/run log's counts and slowest tests."""

import json

import pytest

from tools import test_runs

LOG_TAIL = """........ [100%]
============================= slowest 25 durations =============================
85.91s call     tests/test_nb01_grpo.py::test_a_run_killed_mid_training_resumes_to_its_last_step
3.10s setup    tests/test_generation.py::test_x[tiny]
=========================== short test summary info ============================
SKIPPED [5] tests/test_contract_reasoning_gym.py: set OPENENV_UPSTREAM to run upstream's own code
1 failed, 925 passed, 11 skipped, 55 warnings in 1186.55s (0:19:46)
"""


def test_the_guides_block_is_what_the_generator_writes():
    assert test_runs.main(["--check"]) == 0, "run python -m tools.test_runs"


def test_a_log_is_read_and_recorded_and_the_block_follows(tmp_path, monkeypatch):
    log = tmp_path / "ci.log"
    log.write_text(LOG_TAIL)
    parsed = test_runs.parse_log(LOG_TAIL)
    assert (parsed["passed"], parsed["failed"], parsed["skipped"], parsed["pytest_seconds"]) == (925, 1, 11, 1186.55)
    assert [s["test"] for s in parsed["slowest"]][0].endswith("resumes_to_its_last_step")
    store = tmp_path / "runs.json"
    record = test_runs.add(log, "abc1234", "one core busy", 1400.0, path=store)
    assert json.loads(store.read_text())["runs"] == [record]
    block = test_runs.render_block([record])
    assert "| abc1234 | one core busy | 925 passed, 1 failed | 19.8 | 23.3 |" in block
    guide = f"before\n{test_runs.BEGIN}\nold\n{test_runs.END}\nafter"
    assert test_runs.render(guide, [record]) == f"before\n{block}\nafter"


def test_a_log_without_a_summary_is_refused():
    with pytest.raises(ValueError, match="no pytest summary"):
        test_runs.parse_log("collecting ...\nKilled\n")
