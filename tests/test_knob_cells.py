"""The knob cells under papermill: a value passed with `-p` for a lesson knob (the parameters cell) and for a "more
knobs" one (the cell below it) both reach `settings`, because papermill puts them in the `injected-parameters`
placeholder below both cells. Run on notebook 01's own first cells, up to and including its settings cell."""

import json

import nbformat
import pytest

from tools.notebooks import INJECTED, NOTEBOOKS_DIR, cell_outputs_text, run_notebook, write_notebook

NB = NOTEBOOKS_DIR / "01_grpo_walkthrough.ipynb"

REPORT = """\
import json
print("KNOBS", json.dumps({"max_steps": settings.max_steps, "train_minutes": settings.train_minutes,
                           "dataset_config": settings.dataset_config, "save_merged": SAVE_MERGED,
                           "overridden": sorted(settings.overridden)}))
"""


def _first_cells(path, tmp_path, *, placeholder=True):
    """notebook `path`'s code cells up to its settings cell (the one calling resolve_settings), tags kept, then a
    cell printing what arrived; without the placeholder when `placeholder` is False."""
    cells = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        tags = [t for t in cell.metadata.get("tags", []) if t in ("parameters", "more-parameters", INJECTED)]
        if tags == [INJECTED] and not placeholder:
            continue
        cells.append((tags[0] if tags else "code", cell.source))
        if "resolve_settings(" in cell.source:
            break
    return write_notebook(tmp_path / path.name, [("md", "# first cells"), *cells, ("code", REPORT)])


def _run(source, tmp_path, **parameters):
    executed = run_notebook(source, tmp_path / "executed.ipynb", {"PROFILE": "tiny", **parameters}, cwd=tmp_path)
    text = cell_outputs_text(tmp_path / "executed.ipynb")
    line = next(line for line in text.splitlines() if line.startswith("KNOBS "))
    return json.loads(line[len("KNOBS "):]), executed


@pytest.mark.notebook
def test_values_passed_with_papermill_reach_settings_for_a_lesson_knob_and_a_more_knob(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path / "runs"))   # inherited by the kernel
    source = _first_cells(NB, tmp_path)
    knobs, executed = _run(source, tmp_path, MAX_STEPS=3, TRAIN_MINUTES=7, DATASET_CONFIG={"min_terms": 3},
                           SAVE_MERGED=True)
    assert knobs == {"max_steps": 3, "train_minutes": 7, "dataset_config": {"min_terms": 3}, "save_merged": True,
                     "overridden": ["dataset_config", "max_steps", "train_minutes"]}
    tags = [c.metadata.get("tags", []) for c in executed.cells]
    injected = tags.index([INJECTED])
    assert tags[injected - 1] == ["more-parameters"]   # papermill replaced the placeholder, below both knob cells
    assert "MAX_STEPS = 3" in executed.cells[injected].source

    nothing_passed, _ = _run(source, tmp_path)   # the cells' own values: the profile's
    assert nothing_passed["max_steps"] == 2 and nothing_passed["train_minutes"] is None
    assert nothing_passed["overridden"] == [] and nothing_passed["save_merged"] is False


@pytest.mark.notebook
def test_without_the_placeholder_the_more_knobs_cell_would_overwrite_a_passed_value(tmp_path, monkeypatch):
    """Why the placeholder exists: papermill otherwise puts the values right after the parameters cell, and the
    "more knobs" cell below sets its knobs again."""
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path / "runs"))
    knobs, _ = _run(_first_cells(NB, tmp_path, placeholder=False), tmp_path, MAX_STEPS=3, TRAIN_MINUTES=7)
    assert knobs["max_steps"] == 3 and knobs["train_minutes"] is None   # the more knob's value was lost


def test_a_passed_name_that_no_knob_cell_sets_is_refused_before_the_run(tmp_path):
    with pytest.raises(ValueError, match="no knob LEARNIG_RATE .*did you mean LEARNING_RATE"):
        run_notebook(NB, tmp_path / "never.ipynb", {"PROFILE": "tiny", "LEARNIG_RATE": 1e-4})
    assert not (tmp_path / "never.ipynb").exists()
