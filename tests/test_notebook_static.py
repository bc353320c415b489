"""The static gate every notebook passes: valid nbformat, kernelspec, no outputs, one
`parameters` cell, a Colab badge first. Runs in a second, before anything is executed."""

import pytest

from tools.notebooks import NOTEBOOKS_DIR, numbered_notebooks, static_problems, write_notebook

NOTEBOOKS = numbered_notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_numbered_notebook_passes_the_gate(path):
    assert static_problems(path) == []


def test_only_numbered_notebooks_live_in_notebooks_dir():
    stray = [p.name for p in NOTEBOOKS_DIR.glob("*.ipynb") if p not in NOTEBOOKS]
    assert not stray, f"name notebooks NN_topic.ipynb: {stray}"


def test_gate_catches_each_problem(tmp_path):
    bad = write_notebook(tmp_path / "bad.ipynb", [("md", "# no badge"), ("code", "x = 1")])
    import nbformat

    nb = nbformat.read(bad, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    del nb.metadata["kernelspec"]
    nbformat.write(nb, bad)
    problems = "\n".join(static_problems(bad))
    for expected in ("kernelspec", "committed outputs", "tagged 'parameters'", "Colab badge"):
        assert expected in problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_papermill_sees_every_parameter(path, caplog):
    """papermill skips a parameter line with a second '=' (say in its comment) and then warns
    'Passed unknown parameter' for every override of it: each assignment must parse."""
    import re

    import nbformat
    import papermill

    cell = next(c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
    assigned = re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", cell.source, flags=re.M)
    with caplog.at_level("WARNING", logger="papermill"):
        found = papermill.inspect_notebook(str(path))
    assert list(found) == assigned
    assert "Unable to parse" not in caplog.text


def _badged(tmp_path, name, cells, more_at=None):
    """A notebook with a Colab badge and `cells`; the code cell at index `more_at` is tagged 'more-parameters'."""
    import nbformat

    path = write_notebook(tmp_path / name, [("md", "# T\n\n[badge](colab-badge.svg)")] + cells)
    if more_at is not None:
        nb = nbformat.read(path, as_version=4)
        for i in [more_at] if isinstance(more_at, int) else more_at:
            nb.cells[i].metadata["tags"] = ["more-parameters"]
        nbformat.write(nb, path)
    return path


def test_gate_caps_the_parameters_cell_at_ten_knobs_and_places_the_more_knobs_cell(tmp_path):
    from tools.notebooks import MAX_LESSON_KNOBS

    assert MAX_LESSON_KNOBS == 10
    ten = "\n".join(f"KNOB_{i} = None   # knob {i}" for i in range(10))
    eleven = ten + "\nKNOB_10 = None"
    more = "from helpers.profiles import more_knobs\n\nmore_knobs(globals(),\n    EXTRA=None,   # extra\n)"
    assert static_problems(_badged(tmp_path, "ok.ipynb", [("parameters", ten), ("code", more), ("code", "x = 1")],
                                   more_at=2)) == []
    too_many = "\n".join(static_problems(_badged(tmp_path, "eleven.ipynb", [("parameters", eleven)])))
    assert "holds 11 knobs" in too_many and "'more-parameters'" in too_many
    misplaced = _badged(tmp_path, "misplaced.ipynb", [("parameters", ten), ("code", "x = 1"), ("code", more)],
                        more_at=3)
    assert any("right below the parameters cell" in p for p in static_problems(misplaced))
    above = _badged(tmp_path, "above.ipynb", [("code", more), ("parameters", ten)], more_at=1)
    assert any("right below the parameters cell" in p for p in static_problems(above))
    twice = _badged(tmp_path, "twice.ipynb", [("parameters", ten), ("code", more), ("code", more)], more_at=[2, 3])
    assert any("one 'more-parameters' cell at most" in p for p in static_problems(twice))
