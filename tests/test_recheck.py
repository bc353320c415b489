"""tools/recheck.py: both models scored by the real reasoning_gym server on the same held-out questions."""

from __future__ import annotations

import json

import pytest

from helpers.model_folders import resolve_model
from tools.recheck import main, recheck

CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def test_a_model_against_itself_changes_nothing(rg_server):
    path = resolve_model("tiny-toolcall")
    record = recheck(path, path, rg_server.base_url, n=4, dataset_config=CONFIG, max_new_tokens=40, progress=False)
    assert record["n"] == 4 and record["accuracy_before"] == record["accuracy_after"]  # greedy: the same replies
    assert record["change"] == 0 and record["gained"] == record["lost"] == 0 and record["change_ci"] == [0, 0]


def test_the_command_writes_its_record_and_names_a_missing_folder(rg_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path / "runs"))
    path = resolve_model("tiny-toolcall")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nowhere"), path])
    assert "no model there" in capsys.readouterr().err
    record = main([path, path, "--n", "3", "--profile", "tiny", "--env-base-url", rg_server.base_url])
    written = json.loads((tmp_path / "runs" / "recheck" / "recheck.json").read_text())
    assert written == record and written["n"] == 3 and written["dataset_config"]["max_digits"] == 1
    assert "on the same 3 questions" in capsys.readouterr().out
