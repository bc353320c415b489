"""Run notebooks with papermill and check them statically (the gate every notebook passes).

Used by the tests, by `make` targets and by the Colab generator; notebooks never import it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
# The GitHub home of this project, used by Colab badges and install cells. Change it in a fork.
GITHUB_REPO = "agent-rl-notebooks/agent-rl-notebooks"
# The git ref every Colab badge opens AND every Colab set-up cell installs from, so a Colab copy and the
# code it installs always come from the same place. `main` always exists; a release regenerates colab/
# with its tag (`python -m tools.colab --ref v0.2.0`, docs/guide.md "Cutting a release").
COLAB_REF = "main"


def colab_url(ref: str = COLAB_REF) -> str:
    return f"https://colab.research.google.com/github/{GITHUB_REPO}/blob/{ref}"


def colab_badge(relative_path: str, ref: str = COLAB_REF) -> str:
    """Markdown for an "Open in Colab" badge pointing at `relative_path` in the repository at `ref`."""
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab_url(ref)}/{relative_path})")


def numbered_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def static_problems(path: str | os.PathLike, *, require_badge: bool = True) -> list[str]:
    """Everything wrong with a notebook as committed; an empty list means it passes the gate."""
    import nbformat

    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # not JSON, or not valid nbformat
        return [f"{path.name}: not a valid notebook ({exc})"]
    problems = []
    if not nb.metadata.get("kernelspec", {}).get("name"):
        problems.append(f"{path.name}: metadata.kernelspec is missing (papermill needs it)")
    if not nb.metadata.get("language_info", {}).get("name"):
        problems.append(f"{path.name}: metadata.language_info is missing (papermill needs it)")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count")):
            problems.append(f"{path.name}: cell {i} has committed outputs; clear them")
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        problems.append(f"{path.name}: needs exactly one cell tagged 'parameters', found {len(tagged)}")
    if len(tagged) == 1:
        knobs = [k for k in parameter_names(nb.cells[tagged[0]].source) if k != "HUB_LOGIN"]   # Colab's login switch
        if len(knobs) > MAX_LESSON_KNOBS:
            problems.append(f"{path.name}: the parameters cell holds {len(knobs)} knobs; keep the lesson's "
                            f"{MAX_LESSON_KNOBS} at most there and move the rest to the 'more-parameters' cell")
        more = [i for i, c in enumerate(nb.cells) if "more-parameters" in c.get("metadata", {}).get("tags", [])]
        if len(more) > 1 or (more and more[0] != tagged[0] + 1):
            problems.append(f"{path.name}: one 'more-parameters' cell at most, right below the parameters cell")
        for i, tag in [(tagged[0], "parameters"), *((i, "more-parameters") for i in more)]:
            problems += [f"{path.name}: the {tag} cell, {p}" for p in not_plain_knobs(nb.cells[i].source)]
        injected = [i for i, c in enumerate(nb.cells) if INJECTED in c.get("metadata", {}).get("tags", [])]
        above = more[0] if more else tagged[0]
        if injected != ([above + 1] if more or injected else []):
            problems.append(f"{path.name}: needs one cell tagged {INJECTED!r}, right below the "
                            f"{'more-parameters' if more else 'parameters'} cell: papermill replaces it with the "
                            "values passed, so they win over the knob cells above it")
        for i in injected:
            if any(not line.lstrip().startswith("#") for line in nb.cells[i].source.splitlines() if line.strip()):
                problems.append(f"{path.name}: the {INJECTED!r} cell is a placeholder: comments only, no code")
    if require_badge and (not nb.cells or "colab-badge.svg" not in nb.cells[0].source):
        problems.append(f"{path.name}: the first cell must hold the Open-in-Colab badge")
    return problems


# The lesson's knobs in a parameters cell; every other knob sits in the "more knobs" cell below it.
MAX_LESSON_KNOBS = 10

# The tag of the placeholder cell below the knob cells: papermill replaces the cell so tagged with the values passed
# (`-p NAME value`); without it, it would put them right after the parameters cell, where the "more knobs" cell
# would overwrite them.
INJECTED = "injected-parameters"
INJECTED_PLACEHOLDER = "# papermill -p NAME value puts the values you pass here, after both knob cells (nothing to edit)"


def not_plain_knobs(source: str) -> list[str]:
    """What keeps a knob cell from being plain assignments, one knob a line: `NAME = literal  # comment`."""
    import ast

    problems = []
    for stmt in ast.parse(source).body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if not (isinstance(target, ast.Name) and target.id.isupper()):
            problems.append(f"line {stmt.lineno}: holds `{ast.get_source_segment(source, stmt).splitlines()[0]}`, "
                            "not an assignment of one UPPERCASE knob")
            continue
        try:
            ast.literal_eval(stmt.value)
        except ValueError:
            problems.append(f"line {stmt.lineno}: {target.id}'s value is not a literal (a flag and a form field need one)")
    return problems


def parameter_names(source: str) -> list[str]:
    """The knobs a parameters cell assigns (UPPERCASE names at the start of a line)."""
    import re

    return re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", source, flags=re.M)


def knob_names(path: str | os.PathLike) -> list[str]:
    """Every knob notebook `path` sets in its knob cells: the parameters cell's, then the "more knobs" cell's."""
    cells = json.loads(Path(path).read_text())["cells"]
    return [name for tag in ("parameters", "more-parameters") for c in cells
            if c["cell_type"] == "code" and tag in c.get("metadata", {}).get("tags", [])
            for name in parameter_names(c["source"] if isinstance(c["source"], str) else "".join(c["source"]))]


def check_passed_knobs(path: str | os.PathLike, parameters: dict) -> None:
    """Refuse a value passed for a name neither knob cell sets: it would be a variable nothing reads, and papermill's
    own warning ("Passed unknown parameter") cannot tell it from a "more knobs" one, which it warns about too."""
    import difflib

    known = knob_names(path)
    unknown = [name for name in parameters if name not in known]
    if unknown:
        hints = "".join(f" ({name}: did you mean {close[0]}?)" for name in unknown
                        for close in [difflib.get_close_matches(name, known, n=1, cutoff=0.8)] if close)
        raise ValueError(f"{Path(path).name} has no knob {', '.join(unknown)}{hints}; its knobs: {', '.join(known)}")


def cell_source(path: str | os.PathLike, tag: str) -> str:
    """The source of the one code cell of notebook `path` tagged `tag`: what tests and benchmarks load, so they
    exercise the code a learner reads and edits, not a copy of it."""
    cells = [c for c in json.loads(Path(path).read_text())["cells"]
             if c["cell_type"] == "code" and tag in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise LookupError(f"{Path(path).name}: expected one code cell tagged {tag!r}, found {len(cells)}")
    source = cells[0]["source"]
    return "".join(source) if isinstance(source, list) else source


def load_cells(path: str | os.PathLike, *tags: str, namespace: dict | None = None) -> dict:
    """Run the code cells of notebook `path` tagged `tags`, in that order, in `namespace` (the names those cells
    read from earlier cells, e.g. `env_url`); returns the namespace with what they defined."""
    namespace = {} if namespace is None else namespace
    namespace.setdefault("__name__", f"notebook_{Path(path).stem}")
    for tag in tags:
        exec(compile(cell_source(path, tag), f"{Path(path).name}[{tag}]", "exec"), namespace)
    return namespace


def run_notebook(path: str | os.PathLike, output: str | os.PathLike, parameters: dict | None = None,
                 *, cwd: str | os.PathLike | None = None, timeout: int = 1800):
    """Execute `path` with papermill into `output`, injecting `parameters`; returns the executed notebook.

    `make demo` runs notebooks with progress printed as they go: tools.demo.run_watched.
    """
    import papermill

    check_passed_knobs(path, parameters or {})
    return papermill.execute_notebook(
        str(path), str(output), parameters=parameters or {}, cwd=str(cwd) if cwd else None,
        kernel_name="python3", progress_bar=False, execution_timeout=timeout,
    )


def cell_outputs_text(executed: str | os.PathLike) -> str:
    """All text a notebook printed, for tests that look for a line or scan for secrets."""
    nb = json.loads(Path(executed).read_text())
    chunks = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if "text" in out:
                chunks.append("".join(out["text"]))
            for key in ("text/plain", "text/markdown"):
                if key in out.get("data", {}):
                    chunks.append("".join(out["data"][key]))
            if out.get("output_type") == "error":
                chunks.append("\n".join(out.get("traceback", [])))
    return "\n".join(chunks)


KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3"}


def write_notebook(path: str | os.PathLike, cells: list[tuple[str, str]], metadata: dict | None = None) -> Path:
    """Write a clean notebook from ("md" | "code" | "parameters" | "more-parameters" | "injected-parameters", source)
    pairs.

    "parameters" is a code cell tagged for papermill; "injected-parameters" its placeholder for the values passed
    (source None or "": INJECTED_PLACEHOLDER). Used to author notebooks from scripts and by the Colab generator;
    outputs are never written.
    """
    import nbformat
    from nbformat import v4

    nb_cells = []
    for kind, source in cells:
        source = (source or (INJECTED_PLACEHOLDER if kind == INJECTED else "")).strip("\n")
        if kind == "md":
            nb_cells.append(v4.new_markdown_cell(source))
        elif kind in ("code", "parameters", "more-parameters", INJECTED):
            cell = v4.new_code_cell(source)
            if kind != "code":
                cell.metadata["tags"] = [kind]
            nb_cells.append(cell)
        else:
            raise ValueError(f"cell kind must be md, code, parameters, more-parameters or {INJECTED}, not {kind!r}")
    nb = v4.new_notebook(cells=nb_cells, metadata={
        "kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO, **(metadata or {})})
    for i, cell in enumerate(nb.cells):  # stable ids keep diffs quiet
        cell["id"] = f"cell-{i:02d}"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
