"""Generate the Colab variants in colab/ from the notebooks in notebooks/ (the one source of truth).

    python -m tools.colab            # regenerate colab/ (and drop variants whose notebook is gone)
    python -m tools.colab --check    # exit 1 and list the stale files (tests/test_colab.py does this)
    python -m tools.colab --readme   # print the README's notebook table
    python -m tools.colab --ref v0.2.0   # a release: badges and installs point at the tag

A variant is its notebook plus what a fresh Colab runtime needs, nothing else:
- the first cell's "Open in Colab" badge points at the variant, with a note saying where it came from;
- a set-up cell that installs the pinned stack from this repository but keeps Colab's own torch (and
  Colab's Jupyter: replacing its ipykernel breaks the runtime), this repository's `helpers` + environment
  packages from GitHub, and the offline model files (`--no-deps`) only when asked (the gpu profile does not
  use them). The badge opens the variant at COLAB_REF and the cell installs from that same ref (`main`; a
  release regenerates with `--ref <tag>`), so a variant and the code it installs always come from one
  commit; tests/test_colab.py fails if they can differ or if the ref does not exist. A form field in the
  cell can point elsewhere;
- the `parameters` cell with PROFILE = "gpu" and Colab form fields (`# @param`) for its knobs; the "more knobs"
  cell below it (plain assignments) and papermill's `injected-parameters` placeholder as they are;
- an optional Hugging Face Hub login cell, skipped unless HUB_LOGIN (or PUSH_TO_HUB) is True, and a
  cell that prints the GPU it got and says when it is too small for the gpu profile.
Never edit colab/ by hand: edit the notebook and run the generator.
"""

from __future__ import annotations

import argparse
import ast
import json
import posixpath
import re
import sys
import tempfile
import textwrap
from pathlib import Path

from tools.colab_cells.install import COLAB_KEEPS, colab_requirements
from tools.notebooks import (COLAB_REF, GITHUB_REPO, INJECTED, REPO_ROOT, colab_badge, numbered_notebooks,
                               write_notebook)

COLAB_DIR = REPO_ROOT / "colab"

PROFILE_CHOICES = ("gpu", "cpu", "tiny")
METADATA = {"accelerator": "GPU", "colab": {"provenance": [], "gpuType": "T4"}}


CELLS_DIR = Path(__file__).with_name("colab_cells")


def _cell(name: str, **lines: str) -> str:
    """The cell in colab_cells/<name>.py, each line that starts with a key of `lines` replaced by its value."""
    source = (CELLS_DIR / f"{name}.py").read_text()
    for start, line in lines.items():
        found = [old for old in source.splitlines() if old.startswith(start)]
        if len(found) != 1:
            raise ValueError(f"colab_cells/{name}.py: expected one line starting {start!r}, found {len(found)}")
        source = source.replace(found[0], line)
    return source


def install_cell(ref: str = COLAB_REF) -> str:
    """The Colab set-up cell (colab_cells/install.py) installing from `ref` of this repository."""
    return _cell("install", **{"REF = ": f'REF = "{ref}"  # @param {{type:"string"}}', "REPO = ": f'REPO = "{GITHUB_REPO}"'})


def login_cell(flags: list[str]) -> str:
    """The optional Hub login (colab_cells/login.py), run when any of `flags` is True."""
    either = " or ".join(flags)
    return _cell("login", **{"if HUB_LOGIN:": f"if {either}:",
                             "# Skipped unless HUB_LOGIN": f"# Skipped unless {either} is True."})


HARDWARE_CELL = _cell("hardware")


def _form_line(name: str, value, text: str, comment: str) -> list[str]:
    """`NAME = value  # @param ...` for one knob (`text`: its value as written), its explanation above."""
    above = [f"# {comment}"] if comment else []
    if name == "PROFILE":
        choices = ", ".join(f'"{c}"' for c in PROFILE_CHOICES)
        return above + [f'PROFILE = "gpu"  # @param [{choices}]']
    if isinstance(value, bool):
        kind = "boolean"
    elif isinstance(value, int):
        kind = "integer"
    elif isinstance(value, float):
        kind = "number"
    elif isinstance(value, str):
        kind = "string"
    else:  # None (the profile's value), lists, dicts: typed as a Python literal
        kind = "raw"
    if kind == "string" and not text.startswith('"'):
        text = json.dumps(value)  # Colab's form fields write strings in double quotes
    return above + [f"{name} = {text}  # @param {{type:\"{kind}\"}}"]


def colab_parameters(source: str, *, add_login_flag: bool = True) -> str:
    """The parameters cell as a Colab form: one-line literal assignments become `# @param` fields.

    PROFILE becomes "gpu" (a drop-down); None knobs stay None ("raw" fields, where None still means
    "the profile's value"); anything that is not a one-line literal is kept as it is.
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    replaced: dict[int, list[str]] = {}
    dropped: set[int] = set()
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.lineno == stmt.end_lineno and stmt.col_offset == 0):
            continue
        try:
            value = ast.literal_eval(stmt.value)
        except ValueError:
            continue
        line = lines[stmt.lineno - 1]
        rest = line[stmt.end_col_offset:].strip()
        comment = rest[1:].strip() if rest.startswith("#") else ""
        following = stmt.lineno  # indented comment lines below continue the knob's explanation
        while following < len(lines) and re.match(r"\s+#", lines[following]):
            comment += "\n# " + lines[following].strip()[1:].strip()
            dropped.add(following)
            following += 1
        text = ast.get_source_segment(source, stmt.value)
        replaced[stmt.lineno - 1] = _form_line(stmt.targets[0].id, value, text, comment)
    out = ["# @title Parameters"]
    for i, line in enumerate(lines):
        if i not in dropped:
            out += replaced.get(i, [line])
    if add_login_flag:
        out += ["# True = log in to the Hugging Face Hub in the next cell (pushing needs it)",
                'HUB_LOGIN = False  # @param {type:"boolean"}']
    return "\n".join(out)


def _parameter_names(source: str) -> set[str]:
    return {t.id for s in ast.parse(source).body if isinstance(s, ast.Assign) for t in s.targets
            if isinstance(t, ast.Name)}


def _more_knob_names(cells: list[dict]) -> set[str]:
    """The knobs of a notebook's "more knobs" cell (plain `NAME = value` lines, as in the parameters cell), if any."""
    names = set()
    for cell in cells:
        if "more-parameters" in cell.get("metadata", {}).get("tags", []):
            names |= _parameter_names(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
    return names


_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")


def _first_cell(source: str, name: str, ref: str) -> str:
    badge = colab_badge(f"colab/{name}", ref)
    source = _BADGE.sub(lambda _: badge, source) if _BADGE.search(source) else f"{badge}\n\n{source}"
    github = f"https://github.com/{GITHUB_REPO}/blob/{ref}/notebooks/{name}"
    return (f"{source}\n\n*Colab variant of [`notebooks/{name}`]({github}), generated by "
            f"`python -m tools.colab`: edit that notebook, not this file.*")


SETUP_NOTE = """\
**On Colab:** pick a GPU runtime (*Runtime → Change runtime type*; `PROFILE = "gpu"` fits the run to the card: a
free T4 trains Qwen3-0.6B with LoRA, an A100 the original recipe), then run the set-up cell below. It installs this
project's pinned stack but keeps Colab's own PyTorch. If it upgrades a package Colab had already loaded,
it restarts the runtime once: then run all cells again."""


WARM_STARTED_BY_02 = "01_grpo_walkthrough"  # the notebook whose WARM_START loads notebook 02's checkpoint


def start_point(notebook: str) -> str:
    """What the Colab copy of `notebook` starts from and downloads, read from its gpu profile: each copy runs in
    a runtime of its own, so it cannot count on another notebook's output unless RUNS_DIR shares a Drive folder."""
    from helpers.compute.hardware import CARDS
    from helpers.profiles import gpu_recipe
    from helpers.profiles import NOTEBOOK_PROFILES

    gpu = NOTEBOOK_PROFILES.get(notebook, {}).get("gpu")
    if not gpu or "model" not in gpu:
        return ""
    t4 = gpu_recipe(CARDS["T4 16 GB"]).get("model", gpu["model"])
    lines = [f"**What this copy starts from:** `{gpu['model']}` from the Hugging Face Hub (on a 16 GB card such as "
             f"the free T4, `{t4}` with LoRA: docs/gpu.md), downloaded on first use; the environment servers "
             "start inside this runtime."]
    if notebook == WARM_STARTED_BY_02:
        lines.append("It needs nothing from notebook 02: the gpu profile starts from the base model "
                     "(`WARM_START = False`). To start from notebook 02's checkpoint instead, run 02 with the same "
                     "`RUNS_DIR` (a Drive folder) and set `WARM_START = True`.")
    elif gpu.get("warm_start") is False:
        lines.append("The gpu profile skips the warm start (`WARM_START = False`): Qwen3 calls tools without it.")
    if gpu.get("teacher") == "openai":
        lines.append(f"Its teacher is `{gpu['teacher_model']}` over the OpenAI API: add an `OPENAI_API_KEY` Colab "
                     "secret, or point `LLM_ENDPOINT` at your own server, or set `TEACHER = \"local\"` (offline).")
    if "checkpoint_steps" in gpu:
        lines.append(f"A disconnect loses little: a checkpoint every {gpu['checkpoint_steps']} steps goes to `RUNS_DIR` "
                     "(set a Drive folder), and `RESUME = True` goes on from it.")
    return " ".join(lines)


def _nb_minutes(records, notebook: str, hardware: str) -> str | None:
    """The minutes docs/results.md gives `notebook` on `hardware` as shipped (idle range first), or None."""
    from tools import results

    summary = results.shipped_summary(records, notebook, hardware)
    if summary is None and hardware == "gpu":   # a card ran the cpu recipe with other knobs (no time budget)
        runs = [r for r in records if r["notebook"] == notebook and r["hardware"] == "gpu" and r["profile"] == "cpu"]
        summary = results.summarize(runs) if runs else None
    if summary is None:
        return None
    if summary["idle_minutes"]:
        return results.fmt_range(*summary["idle_minutes"]) + " minutes"
    return results.minutes_text(summary)


def recipe_note(notebook: str) -> str:
    """Which recipe a runtime runs and what docs/results.md measured of it, with its minutes (computed from
    docs/runs.json, as results.md is), for the first cells of the Colab copy of `notebook`."""
    from tools import results

    if notebook not in results.NOTEBOOKS:
        return ("**Which recipe runs here.** Nothing trains in this notebook: every `PROFILE` runs the same lessons "
                "(it only sets how long the sandbox lets a submission run), on a GPU or a CPU runtime alike; it is "
                "not timed in [docs/results.md](../docs/results.md).")
    records = results.load_runs()["runs"]
    nb = notebook[:2]
    card = [r for r in records if r["notebook"] == notebook and r["hardware"] == "gpu"]
    name = next((m.group(0) for r in card for m in [re.search(r"NVIDIA \w+", r["machine"])] if m), None)
    gpu_minutes = _nb_minutes(records, notebook, "gpu")
    if gpu_minutes and name:
        short = name.replace("NVIDIA ", "")
        on_card = (f"on a card ({short}) it was {gpu_minutes}: other runs shared the card"
                   if gpu_minutes.startswith("not timed") else f"on a card it took {gpu_minutes} on an {short}")
    else:
        on_card = "it was not run on a card"
    avx512 = _nb_minutes(records, notebook, "cpu-avx512")
    avx2 = _nb_minutes(records, notebook, "cpu-avx2")
    stopped = any(r["notebook"] == notebook and r["hardware"] == "cpu-avx2" and str(r.get("outcome", "")).startswith("stopped")
                  for r in records)
    cpu = f"{avx512} on 2 idle cores of an AVX-512 CPU" if avx512 else "not timed on 2 cores"
    if avx2:
        cpu += f", {avx2} on an AVX2-only CPU"
    elif stopped:
        cpu += "; an AVX2-only CPU stops its training after the time estimate, and says which TRAIN_MINUTES to set"
    return (f"**Which recipe runs here.** On a GPU runtime this copy runs the `gpu` recipe (`PROFILE = \"gpu\"`, "
            f"the default below): the original tutorial's, whose learning is **not measured** in this project "
            f"([docs/results.md](../docs/results.md#notebook-{nb}): the Colab T4 row is estimated, not measured). "
            f"The measured path is `PROFILE = \"cpu\"` on any runtime (set `INSTALL_OFFLINE_MODELS = True` in the "
            f"set-up cell): {on_card}. A free Colab **CPU** runtime runs `cpu` too: set `PROFILE = \"cpu\"`, or "
            f"`None`, which picks `gpu` only where CUDA is available. There it takes what 2 cores take: {cpu} "
            f"(docs/results.md; which CPU a Colab runtime lends is not measured).")


_MD_LINK = re.compile(r"(!?)(\[[^\]\n]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_REF_LINK = re.compile(r"^(\s{0,3}\[[^\]\n]+\]:\s*)(\S+)", re.M)
_HTML_LINK = re.compile(r"((?:href|src)=\")([^\"]+)(\")")


def absolute_url(url: str, ref: str = COLAB_REF, base: str = "notebooks", image: bool = False) -> str:
    """`url` as written in a notebook under `base`/, made absolute: a relative path (`../docs/guide.md#x`,
    `docs/...`) becomes this repository's GitHub page at `ref` (a file: blob, a folder: tree, an image: raw).
    Absolute URLs, mail links and in-page anchors stay as they are."""
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#|//", url):
        return url
    path, hash_, fragment = url.partition("#")
    target = posixpath.normpath(posixpath.join(base, path))
    if not (REPO_ROOT / target).exists() and path and not path.startswith("..") \
            and (REPO_ROOT / path.split("/")[0]).exists():
        target = posixpath.normpath(path)   # written from the repository's root (`docs/...`)
    if target.startswith(".."):
        raise ValueError(f"link {url!r} leaves the repository")
    if image:
        return f"https://raw.githubusercontent.com/{GITHUB_REPO}/{ref}/{target}"
    kind = "tree" if (REPO_ROOT / target).is_dir() else "blob"
    return f"https://github.com/{GITHUB_REPO}/{kind}/{ref}/{target}{hash_}{fragment}"


def absolute_links(markdown: str, ref: str = COLAB_REF) -> str:
    """Every link of a Colab copy's markdown cell opens from Colab: relative ones become GitHub URLs at `ref`."""
    markdown = _MD_LINK.sub(lambda m: m.group(1) + m.group(2) + absolute_url(m.group(3), ref, image=bool(m.group(1)))
                            + m.group(4), markdown)
    markdown = _REF_LINK.sub(lambda m: m.group(1) + absolute_url(m.group(2), ref), markdown)
    return _HTML_LINK.sub(lambda m: m.group(1) + absolute_url(m.group(2), ref) + m.group(3), markdown)


def colab_cells(notebook: str | Path, ref: str = COLAB_REF) -> list[tuple[str, str]]:
    """The (kind, source) cells of the Colab variant of `notebook`, opened from and installing from `ref`."""
    notebook = Path(notebook)
    nb = json.loads(notebook.read_text())
    knob_tags = {"parameters", "more-parameters", INJECTED}
    last_knob_cell = max((i for i, c in enumerate(nb["cells"]) if knob_tags & set(c.get("metadata", {}).get("tags", []))),
                         default=None)
    cells = []
    for index, cell in enumerate(nb["cells"]):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        tags = cell.get("metadata", {}).get("tags", [])
        if index == 0:
            first = _first_cell(source, notebook.name, ref) if cell["cell_type"] == "markdown" else None
            cells += [("md", first)] if first else [("md", _first_cell("", notebook.name, ref)), ("code", source)]
            note = "\n\n".join(part for part in (recipe_note(notebook.stem), SETUP_NOTE, start_point(notebook.stem))
                                 if part)
            cells += [("md", note), ("code", install_cell(ref))]
        elif "parameters" in tags:
            cells.append(("parameters", colab_parameters(source)))
            more = _more_knob_names(nb["cells"])
            names = _parameter_names(source) | more
            flags = ["HUB_LOGIN"] + (["PUSH_TO_HUB"] if "PUSH_TO_HUB" in names else [])
            added = [("code", login_cell(flags)), ("code", HARDWARE_CELL)]
        elif "more-parameters" in tags:
            cells.append(("more-parameters", source))   # plain assignments, edited in place like any code cell
        elif INJECTED in tags:
            cells.append((INJECTED, source))   # kept: a copy run by papermill still takes its values there
        else:
            cells.append(("md" if cell["cell_type"] == "markdown" else "code", source))
        if index == last_knob_cell:
            cells += added   # the login and hardware cells follow the knob cells
    return [(kind, absolute_links(source, ref) if kind == "md" else source) for kind, source in cells]


def write_variant(notebook: str | Path, out_dir: str | Path = COLAB_DIR, ref: str = COLAB_REF) -> Path:
    notebook = Path(notebook)
    return write_notebook(Path(out_dir) / notebook.name, colab_cells(notebook, ref), metadata=METADATA)


def generate_all(out_dir: str | Path = COLAB_DIR, notebooks=None, ref: str = COLAB_REF) -> list[Path]:
    """Write every variant into `out_dir` and remove variants whose notebook no longer exists."""
    notebooks = [Path(p) for p in (notebooks if notebooks is not None else numbered_notebooks())]
    out_dir = Path(out_dir)
    written = [write_variant(nb, out_dir, ref) for nb in notebooks]
    keep = {p.name for p in notebooks}
    for orphan in out_dir.glob("*.ipynb"):
        if orphan.name not in keep:
            orphan.unlink()
    return written


def stale_files(colab_dir: str | Path = COLAB_DIR, notebooks=None, ref: str = COLAB_REF) -> list[str]:
    """What `generate_all` would change in `colab_dir`: missing, out-of-date and orphaned variants."""
    colab_dir = Path(colab_dir)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in generate_all(tmp, notebooks, ref)}
    present = {p.name: p.read_bytes() for p in colab_dir.glob("*.ipynb")}
    stale = []
    for name in sorted(set(fresh) | set(present)):
        if name not in present:
            stale.append(f"colab/{name}: missing")
        elif name not in fresh:
            stale.append(f"colab/{name}: no notebooks/{name} any more")
        elif fresh[name] != present[name]:
            stale.append(f"colab/{name}: out of date with notebooks/{name}")
    return stale


_PLAN = re.compile(r"(In this notebook|This notebook|You will|You'll|You ([a-z]+ )?(learn|train|build|take|see))")


def _summary(markdown: str) -> str:
    """What a notebook teaches, from its first cell: the sentence that says what you will do (\"In this
    notebook you ...\", \"You will ...\"), else the first sentence of the first prose paragraph."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", markdown):
        text = " ".join(line.strip() for line in paragraph.splitlines()
                        if line.strip() and not line.lstrip().startswith(("#", "[![", "*Colab variant")))
        text = _BADGE.sub("", text).strip()
        sentences += [t for t in re.split(r"(?<=[.!?])\s+", text) if t]
    if not sentences:
        return ""
    index = next((i for i, t in enumerate(sentences) if _PLAN.match(t)), 0)
    sentence = sentences[index]
    if index and len(sentences[index - 1]) + len(sentence) < 320:  # "...: in this notebook you take over *that*"
        sentence = f"{sentences[index - 1]} {sentence}"
    if len(sentence) > 300:
        sentence = _shorten(sentence, 300)
    return sentence.replace("|", "\\|")


def _shorten(text: str, limit: int) -> str:
    """Cut `text` at a clause boundary before `limit`, leaving no open bracket, bold or code span."""
    cut = text[:limit]
    clause = max(cut.rfind(": "), cut.rfind("; "))
    cut = cut[:clause] if clause > limit // 3 else cut[:cut.rfind(", ")] if ", " in cut else cut.rsplit(" ", 1)[0]
    while cut.count("(") > cut.count(")"):
        cut = cut[:cut.rfind("(")]
    for mark in ("**", "`"):
        if cut.count(mark) % 2:
            cut = cut[:cut.rfind(mark)]
    return cut.rstrip(" ,;:") + " …"


def _title(markdown: str, fallback: str) -> str:
    for line in markdown.splitlines():
        if line.startswith("# "):  # "# 04 · OpenReward: ..." -> "OpenReward: ..." (the table numbers rows)
            return re.sub(r"^\d+\s*[·.:\-–—]\s*", "", line[2:].strip()).replace("|", "\\|")
    return fallback


def readme_table(notebooks=None) -> str:
    """The README's notebook table: each notebook, what it teaches, and its Colab badge."""
    rows = ["| # | Notebook | What you learn | Run it |", "|---|---|---|---|"]
    for path in notebooks if notebooks is not None else numbered_notebooks():
        path = Path(path)
        cells = json.loads(path.read_text())["cells"]
        first = "".join(cells[0]["source"]) if cells else ""
        number = path.name.split("_", 1)[0]
        title = _title(first, path.stem)
        rows.append(f"| {number} | [{title}](notebooks/{path.name}) | {_summary(first)} | "
                    f"{colab_badge(f'colab/{path.name}')} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__).split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list stale files and exit 1 instead of writing")
    parser.add_argument("--readme", action="store_true", help="print the README notebook table")
    parser.add_argument("--ref", default=COLAB_REF,
                        help=f"the git ref badges open and set-up cells install from (default {COLAB_REF}; a release: its tag)")
    args = parser.parse_args(argv)
    if args.readme:
        print(readme_table())
        return 0
    if args.check:
        stale = stale_files(ref=args.ref)
        for line in stale:
            print(line)
        if stale:
            print("Regenerate with: python -m tools.colab")
        return 1 if stale else 0
    for path in generate_all(ref=args.ref):
        print("wrote", path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
