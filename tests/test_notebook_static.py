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


def _badged(tmp_path, name, cells):
    """A notebook with a Colab badge and `cells` ((kind, source) pairs, as tools.notebooks.write_notebook takes)."""
    return write_notebook(tmp_path / name, [("md", "# T\n\n[badge](colab-badge.svg)")] + cells)


MORE = '# More knobs\nEXTRA = None   # extra\nNAME = "run"   # a name'


def test_gate_caps_the_parameters_cell_at_ten_knobs_and_places_the_knob_cells(tmp_path):
    from tools.notebooks import MAX_LESSON_KNOBS

    assert MAX_LESSON_KNOBS == 10
    ten = "\n".join(f"KNOB_{i} = None   # knob {i}" for i in range(10))
    eleven = ten + "\nKNOB_10 = None"
    more, placeholder = ("more-parameters", MORE), ("injected-parameters", None)

    def problems(name, *cells):
        return "\n".join(static_problems(_badged(tmp_path, name, list(cells))))

    assert problems("ok.ipynb", ("parameters", ten), more, placeholder, ("code", "x = 1")) == ""
    assert problems("alone.ipynb", ("parameters", ten), ("code", "x = 1")) == ""   # no more knobs: no placeholder
    too_many = problems("eleven.ipynb", ("parameters", eleven))
    assert "holds 11 knobs" in too_many and "'more-parameters'" in too_many
    below = "right below the parameters cell"
    assert below in problems("misplaced.ipynb", ("parameters", ten), ("code", "x = 1"), more, placeholder)
    assert below in problems("above.ipynb", more, placeholder, ("parameters", ten))
    assert "one 'more-parameters' cell at most" in problems("twice.ipynb", ("parameters", ten), more, more, placeholder)
    missing = "one cell tagged 'injected-parameters', right below the more-parameters cell"
    assert missing in problems("missing.ipynb", ("parameters", ten), more, ("code", "x = 1"))
    assert missing in problems("late.ipynb", ("parameters", ten), more, ("code", "x = 1"), placeholder)
    assert "right below the parameters cell: papermill" in problems("stray.ipynb", ("parameters", ten),
                                                                   ("code", "x = 1"), placeholder)
    assert "comments only" in problems("code.ipynb", ("parameters", ten), more, ("injected-parameters", "X = 1"))


@pytest.mark.parametrize("source, why", [
    ("from helpers.profiles import more_knobs\n\nmore_knobs(globals(),\n    EXTRA=None,   # extra\n)",
     "not an assignment of one UPPERCASE knob"),
    ("EXTRA = compute()   # a call", "EXTRA's value is not a literal"),
    ("extra = None", "not an assignment of one UPPERCASE knob"),
    ("A = B = None", "not an assignment of one UPPERCASE knob"),
])
def test_gate_wants_the_knob_cells_plain_one_literal_knob_a_line(tmp_path, source, why):
    ok = "PROFILE = None"
    for cells in ([("parameters", ok), ("more-parameters", source), ("injected-parameters", None)],
                  [("parameters", source)]):
        found = "\n".join(static_problems(_badged(tmp_path, "knobs.ipynb", cells)))
        assert why in found, found


def _code(cell) -> str:
    """A code cell's source as Python: magics and shell lines dropped, top-level `await` allowed."""
    import ast

    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
    return ast.parse(source)


def _settings_call(path):
    """(index of the cell that calls resolve_settings, that call)."""
    import ast

    import nbformat

    cells = nbformat.read(path, as_version=4).cells
    return next((i, node) for i, c in enumerate(cells) if c.cell_type == "code" for node in ast.walk(_code(c))
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "resolve_settings")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_settings_cell_passes_each_knob_that_is_a_setting_by_name_and_reads_it_only_through_settings(path):
    """One channel per knob: a knob that is a profile setting goes to resolve_settings as `name=NAME` and is read as
    `settings.name` afterwards (never bare); a knob that is not a setting is never passed (it stays a variable)."""
    import ast

    import nbformat

    from helpers.recipes import RECIPES
    from tools.notebooks import knob_names

    keys = set(RECIPES[path.stem].profiles["cpu"])
    settings_knobs = {k for k in knob_names(path) if k.lower() in keys}
    index, call = _settings_call(path)
    assert [ast.unparse(a) for a in call.args] == ["NOTEBOOK", "PROFILE"]
    assert {k.arg: ast.unparse(k.value) for k in call.keywords} == {k.lower(): k for k in settings_knobs}
    cells = nbformat.read(path, as_version=4).cells
    bare = [(i, node.id) for i, cell in enumerate(cells) if i > index and cell.cell_type == "code"
            for node in ast.walk(_code(cell)) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            and node.id in settings_knobs]
    assert not bare, f"read these through settings.<name> instead (cell, knob): {bare}"


def test_no_notebook_cell_and_no_module_of_helpers_or_tools_looks_names_up_through_globals():
    """Knobs travel by name (the settings cell's keywords), never by a lookup in the notebook's namespace."""
    import ast

    import nbformat

    from tools.notebooks import REPO_ROOT

    def uses_globals(tree):
        return any(isinstance(node, ast.Name) and node.id == "globals" for node in ast.walk(tree))

    found = [f"{p.name} cell {i}" for p in NOTEBOOKS + sorted((REPO_ROOT / "colab").glob("*.ipynb"))
             for i, c in enumerate(nbformat.read(p, as_version=4).cells) if c.cell_type == "code" and uses_globals(_code(c))]
    found += [str(p.relative_to(REPO_ROOT)) for folder in ("helpers", "tools") for p in sorted((REPO_ROOT / folder).rglob("*.py"))
              if uses_globals(ast.parse(p.read_text())) or "globals()" in p.read_text()]
    assert not found, found


PLUMBING_LIMIT = 60   # issue 73: a training notebook reaches its trainer in at most this many untagged code lines
KNOB_TAGS = {"parameters", "more-parameters", "injected-parameters"}


def plumbing_lines_before_the_trainer(nb) -> tuple[int, int]:
    """(untagged, lesson-tagged) code lines before the line that builds the notebook's trainer (`trainer = X(`),
    comments, blank lines and the knob cells left out; (-1, -1) when no cell builds `trainer`."""
    import re

    untagged = tagged = 0
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type != "code" or tags & KNOB_TAGS:
            continue
        for line in cell.source.splitlines():
            if re.match(r"trainer = \w+\(", line):
                return untagged, tagged
            if line.strip() and not line.strip().startswith("#"):
                if tags:
                    tagged += 1
                else:
                    untagged += 1
    return -1, -1


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if not p.name.startswith("00")], ids=lambda p: p.name)
def test_a_training_notebook_reaches_its_trainer_through_the_tutorials_steps_not_plumbing(path):
    """Read top to bottom, the cells before the trainer are the tutorial's steps (tagged lesson cells); what the lesson
    is not about is one named line each. The count the issue measured: 144 untagged lines in 01, 116 in 02."""
    import nbformat

    untagged, tagged = plumbing_lines_before_the_trainer(nbformat.read(path, as_version=4))
    assert untagged >= 0, f"{path.name}: no cell builds `trainer = ...(`"
    assert untagged <= PLUMBING_LIMIT, (f"{path.name}: {untagged} untagged code lines before the trainer (at most "
                                        f"{PLUMBING_LIMIT}): move set-up into a named helper line, or after training")
    assert tagged > untagged / 2, f"{path.name}: {tagged} lesson lines against {untagged} of plumbing"


def test_the_plumbing_count_counts_code_not_comments_knobs_or_tagged_cells():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("X = 1\nY = 2", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("# a comment\n\nsetup()\nmore()"),
        nbformat.v4.new_code_cell("config = Config(\n    a=1,\n)", metadata={"tags": ["grpo-config"]}),
        nbformat.v4.new_code_cell("check()\ntrainer = Trainer(\n    args=config)\ntrainer.train()"),
    ])
    assert plumbing_lines_before_the_trainer(nb) == (3, 3)
    nb.cells.pop()
    assert plumbing_lines_before_the_trainer(nb) == (-1, -1)


PROSE_LIMIT = 1800   # words of markdown a notebook holds: a lesson reads in minutes; research and history go in docs/


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebooks_prose_reads_in_minutes(path):
    import re

    import nbformat

    nb = nbformat.read(path, as_version=4)
    words = sum(len(re.findall(r"\S+", cell.source)) for cell in nb.cells if cell.cell_type == "markdown")
    assert words <= PROSE_LIMIT, f"{path.name}: {words} words of prose (at most {PROSE_LIMIT}); move depth to docs/"
