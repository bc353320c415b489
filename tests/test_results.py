"""docs/results.md is generated from docs/runs.json and helpers/recipes.py, is fresh, computes its numbers from the
records, and the numbers other files state (evaluation size, re-check size, reference runs, minutes) agree with it."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.recipes import RECIPES
from tools import results

ROOT = results.REPO_ROOT
DATA = results.load_runs()
RECORDS = DATA["runs"]
NB01 = "01_grpo_walkthrough"
EVAL_N = RECIPES[NB01].profiles["cpu"]["eval_n"]
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def recheck_module():
    return importlib.import_module("tools.recheck")


def text(path: Path) -> str:
    return path.read_text()


def shipped(notebook: str, hardware: str = "cpu-avx512", records=RECORDS) -> list[dict]:
    """The records of `notebook`'s `cpu` profile as shipped today on `hardware`, selected here without the
    generator's grouping: every recipe value the record states equals the profile's."""
    profile = {**RECIPES[notebook].profiles["cpu"], **(RECIPES[notebook].slow_cpu if hardware == "cpu-avx2" else {})}
    return [r for r in records if r["notebook"] == notebook and r["hardware"] == hardware and r["profile"] == "cpu"
            and all(profile[k] == v for k, v in r.get("recipe", {}).items())]


# --- the page is fresh ------------------------------------------------------------------------------------------

def test_the_page_is_what_the_generator_writes():
    assert results.RESULTS_FILE.read_text() == results.render(), (
        "docs/results.md is stale (docs/runs.json, helpers/recipes.py or reference_runs.json changed): "
        "run python -m tools.results")


def test_check_exits_nonzero_on_a_stale_page(tmp_path, monkeypatch):
    page = tmp_path / "results.md"
    monkeypatch.setattr(results, "RESULTS_FILE", page)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    assert results.main(["--check"]) == 1                     # missing
    page.write_text(results.render().replace("+7.9", "+10.0"))
    assert results.main(["--check"]) == 1                     # a number edited by hand
    assert results.main([]) == 0 and page.read_text() == results.render()
    assert results.main(["--check"]) == 0


def test_the_command_line_check_passes_on_this_checkout():
    done = subprocess.run([sys.executable, "-m", "tools.results", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the records ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r['notebook'][:2]}-{r['hardware']}-{r['date']}-s{r['seed']}")
def test_each_record_is_complete_and_consistent(record):
    for field in ("notebook", "profile", "hardware", "machine", "date", "seed", "steps", "metric", "timing",
                  "recipe", "source"):
        assert field in record, field
    assert record["hardware"] in DATA["hardware"] and record["timing"] in ("idle", *results.TIMING_WHY)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d(/\d\d)?", record["date"])
    profile = RECIPES[record["notebook"]].profiles[record["profile"]]
    assert set(record["recipe"]) <= set(profile), "a recipe key the profile does not have"
    assert record.get("change") is not None or record.get("outcome"), "a run shows a change or says what happened"
    if record.get("ci") is not None:
        low, high = record["ci"]
        assert low <= record["change"] <= high
    if None not in (record.get("before"), record.get("after"), record.get("change")):
        assert abs(record["after"] - record["before"] - record["change"]) <= 0.15   # each rounded to 0.1
    assert (record.get("wall_s") is None) != (record.get("minutes") is None) or record["hardware"] == "gpu"


def test_the_runs_the_brief_named_are_there():
    changes = sorted(r["change"] for r in shipped(NB01))
    # six Zen 5 seeds at 0.7, the Zen 4 reference run (shared), the Zen 4 run with the faster evaluation (issue 78),
    # the Zen 4 reference run regenerated idle (issue 77)
    assert changes == sorted([3.5, 12.9, 9.5, 7.0, 9.4, 7.7, 2.5, 10.3, 10.4])
    card = [r for r in RECORDS if r["notebook"] == NB01 and r["hardware"] == "gpu"]
    assert sorted(r["change"] for r in card) == [6.1, 9.2]                          # the H200's two seeds
    avx2 = [r for r in RECORDS if r["notebook"] == NB01 and r["hardware"] == "cpu-avx2"]
    assert {r["recipe"]["temperature"] for r in avx2} == {0.7, 0.9}
    assert {r["recipe"]["train_minutes"] for r in avx2} == {20, 42, 22}   # 22: the slow-CPU recipe (issue 68)
    slow = shipped(NB01, "cpu-avx2")
    assert len(slow) >= 2 and all(r["recipe"]["eval_n"] == RECIPES[NB01].slow_cpu["eval_n"] for r in slow)
    for notebook, runs in (("02_sft_warmup", 3), ("03_wordle_rollout_func", 3), ("04_openreward_spec", 3)):
        assert len([r for r in shipped(notebook) if r.get("change") is not None]) >= runs


def test_reference_band_records_are_the_stored_reference_runs():
    stored = results.reference_counts()
    assert stored, "no reference runs found"
    for notebook, by_profile in stored.items():
        for profile, seeds in by_profile.items():
            flagged = [r["seed"] for r in RECORDS
                       if r["notebook"] == notebook and r["profile"] == profile and r.get("reference_band")]
            assert sorted(flagged) == sorted(seeds), (notebook, profile)


def test_reference_file_is_found_through_helpers():
    module = importlib.import_module("helpers.reporting.reference")
    assert results.reference_file() == Path(module.REFERENCE_FILE) and results.reference_file().exists()


# --- the numbers are computed, not typed ------------------------------------------------------------------------

def row(page: str, notebook: str, hardware: str, label: str) -> str:
    section = page.split(f"## Notebook {notebook[:2]}\n", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        if line.startswith(f"| `{hardware}` | {label} |"):
            return line
    raise AssertionError(f"no row {hardware} {label} in notebook {notebook}")


def test_summary_of_records():
    runs = [{"change": 2.0, "ci": [0.5, 3.5], "steps": 40, "wall_s": 600, "timing": "idle"},
            {"change": 5.0, "ci": [-1.0, 11.0], "steps": 44, "wall_s": 1200, "timing": "idle"},
            {"change": -4.0, "ci": [-6.0, -2.0], "steps": 42, "minutes": 90, "timing": "shared"},
            {"change": None, "outcome": "stopped", "steps": 3, "wall_s": 300, "timing": "older-code"}]
    s = results.summarize(runs)
    assert (s["runs"], s["with_change"], s["mean"], s["lowest"], s["highest"]) == (4, 3, 1.0, -4.0, 5.0)
    assert s["resolved"] == 2 and s["steps"] == (3, 44) and s["idle_minutes"] == (10, 20)
    assert results.minutes_text(s) == "10-20; up to 90 (machine shared)" and s["outcomes"] == ["stopped"]
    assert results.fmt_change((6.1 + 9.2) / 2) == "+7.7" and results.fmt_change(-0.04) == "-0.0"


def test_the_shipped_rows_are_computed_from_the_records():
    page = results.render()
    for notebook in results.NOTEBOOKS:
        runs = shipped(notebook)
        changes = [r["change"] for r in runs if r.get("change") is not None]
        line = row(page, notebook, "cpu-avx512", "`cpu` as shipped")
        mean = sum(changes) / len(changes)
        assert f"mean {results.fmt_change(mean)} ({min(changes):+.1f} to {max(changes):+.1f})" in line, line
        excluding = sum(1 for r in runs if r.get("ci") and (r["ci"][0] > 0 or r["ci"][1] < 0))
        assert f"| {excluding} of {len(changes)} |" in line
        idle = [r["wall_s"] / 60 if r.get("wall_s") else r["minutes"] for r in runs if r["timing"] == "idle"]
        assert line.split("|")[-2].strip().startswith(results.fmt_range(min(idle), max(idle))), line


def test_a_changed_record_changes_the_page():
    data = copy.deepcopy(DATA)
    for r in data["runs"]:
        if r["notebook"] == NB01 and r["hardware"] == "cpu-avx512" and r["seed"] == 1 and r["recipe"]["temperature"] == 0.7:
            r["change"], r["ci"], r["after"] = 20.0, [17.0, 23.0], 69.8
    line = row(results.render(data), NB01, "cpu-avx512", "`cpu` as shipped")
    assert "mean +8.9 (+2.5 to +20.0)" in line   # (3.5 + 20 + 9.5 + 7 + 9.4 + 7.7 + 2.5 + 10.3 + 10.4) / 9 = 8.92


def test_the_page_follows_the_recipes():
    """Change the profile's temperature back to 0.9: the 0.9 control becomes the shipped row, the six seeds a variant."""
    recipe = RECIPES[NB01]
    profiles = copy.deepcopy(recipe.profiles)
    profiles["cpu"]["temperature"] = 0.9
    recipes = {**RECIPES, NB01: dataclasses.replace(recipe, profiles=profiles)}
    page = results.render(recipes=recipes)
    assert "TEMPERATURE=0.9" in page.split("## Notebook 01", 1)[1].split("\n\n", 2)[1]
    assert "| 9 | mean +8.1 (+2.5 to +12.9) |" in row(page, NB01, "cpu-avx512", "`cpu`, TEMPERATURE=0.7")
    assert "| 1 | +9.6 |" in row(page, NB01, "cpu-avx512", "`cpu` as shipped")


def test_a_colab_row_says_estimated_where_nothing_ran_on_it():
    page = results.render()
    for notebook in results.NOTEBOOKS:
        section = page.split(f"## Notebook {notebook[:2]}\n", 1)[1].split("\n## ", 1)[0]
        assert re.search(r"^\| Colab T4 \| .*\*\*estimated, not measured\*\*", section, re.M)
    assert "[docs/measurements.md](measurements.md)" in page


# --- claims elsewhere agree -------------------------------------------------------------------------------------

def claims(pattern: str, source: str) -> list[str]:
    return [m.group(1).replace(",", "") for m in re.finditer(pattern, source)]


def test_the_evaluation_size_agrees_with_the_recipe():
    """What docs/guide.md and tools/recheck.py say notebook 01's `cpu` profile scores is its recipe's eval_n."""
    scored = (r"`cpu`\s+profile\s+scores\s+(\d[\d,]*)", r"(\d[\d,]*)\s+(?:held-out\s+)?(?:sums\s+)?the\s+`cpu`\s+profile\s+scores")
    for path in (ROOT / "docs" / "guide.md", Path(recheck_module().__file__)):
        found = [n for pattern in scored for n in claims(pattern, text(path))]
        assert found, f"{path.name} no longer says how many sums the cpu profile scores"
        assert set(found) == {str(EVAL_N)}, f"{path.name} says the cpu profile scores {found}, the recipe {EVAL_N}"


def test_a_recheck_scores_more_questions_than_the_notebook():
    recheck = recheck_module()
    assert recheck.default_n("cpu") > EVAL_N
    source = text(Path(recheck.__file__))
    assert f"{recheck.default_n('cpu')} for `cpu`" in source
    for path in (ROOT / "docs" / "guide.md", Path(recheck.__file__)):
        for n in claims(r"--n\s+(\d+)", text(path)):
            assert int(n) > EVAL_N, f"{path.name}: `--n {n}` re-scores only the notebook's own {EVAL_N} questions"
    assert set(claims(r"scores\s+both\s+on\s+(\d+)", text(ROOT / "docs" / "guide.md"))) == {str(recheck.default_n("cpu"))}


def test_the_guide_counts_the_stored_reference_runs():
    guide = text(ROOT / "docs" / "guide.md")
    sentence = re.search(r"Stored today:(.*?)[(.]", guide, re.S)
    assert sentence, "the guide no longer says which reference runs are stored"
    said = {nb: WORDS.get(word, word) for nb, word in re.findall(r"notebook\s+(\d\d),?\s+(\w+)", sentence.group(1))}
    stored = {nb[:2]: len(by["cpu"]) for nb, by in results.reference_counts().items()}
    assert said == stored, f"the guide says {said}, helpers' reference_runs.json holds {stored}"


# The numbers printed under a training plot come from this page's own code: tests/test_reference.py
# (test_the_numbers_a_verdict_prints_are_the_results_pages).


def page_minutes(notebook: str) -> set[str]:
    """Every minutes figure the page gives for `notebook`: '31-34', '30', '97' ..."""
    section = results.render().split(f"## Notebook {notebook[:2]}\n", 1)[1].split("<details>", 1)[0]
    cells = [line.split("|")[-2] for line in section.splitlines() if line.startswith("| ")]
    return {n for cell in cells for n in re.findall(r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?", cell)}


@pytest.mark.parametrize("path", ["README.md", "docs/guide.md"])
def test_minutes_claims_quote_the_page(path):
    source = text(ROOT / path)
    found = re.findall(r"notebook (0\d)(?: takes| took)?(?: ~| about| up to)? (~?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?)"
                       r"(?![\d.])", source, re.I)
    assert any(nb == "01" for nb, _ in found), f"{path} no longer says how long notebook 01 takes"
    for nb, minutes in found:
        notebook = next(n for n in results.NOTEBOOKS if n.startswith(nb))
        assert minutes.lstrip("~") in page_minutes(notebook), (
            f"{path}: notebook {nb} takes {minutes} minutes, but docs/results.md gives {sorted(page_minutes(notebook))}")
    demo = []
    for m in re.finditer(r"make demo", source):
        said = re.search(r"(?:~|about )?(\d+(?:-\d+)?) min(?:utes)?\s+on\s+2\s+(?:idle\s+)?cores",
                         source[m.end():m.end() + 400])
        if said:
            demo.append(said.group(1))
    assert demo, f"{path} no longer says how long `make demo` takes"
    assert set(demo) == {results.demo_minutes(RECORDS)}, f"{path}: make demo {demo}, the page {results.demo_minutes(RECORDS)}"


def results_section(nb: str) -> str:
    """The text of docs/results.md's section for notebook `nb` ("01")."""
    page = (ROOT / "docs" / "results.md").read_text()
    return page.split(f"## Notebook {nb}\n", 1)[1].split("\n## ", 1)[0]


SIGNED = re.compile(r"(?<![\w.])[+-]\d+(?:\.\d+)?(?![\w.%])")
MINUTES = re.compile(r"(\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?) minutes")
CLASS_NAMED = re.compile(r"AVX-512|AVX2|cpu-avx")   # a minutes figure holds for one class of CPU: it says which


@pytest.mark.parametrize("nb", ["01", "02", "03", "04"])
def test_notebook_expectations_quote_the_results_page(nb):
    """A learner's 'what to expect' numbers are the results page's: signed held-out changes as the page gives them,
    whole-run minutes as one of its minutes figures."""
    path = next((ROOT / "notebooks").glob(f"{nb}_*.ipynb"))
    notebook = next(n for n in results.NOTEBOOKS if n.startswith(nb))
    changes = set(SIGNED.findall(results_section(nb)))
    for cell in json.loads(path.read_text())["cells"]:
        text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        for paragraph in text.split("\n\n"):
            if "what to expect" in paragraph.lower():
                for number in SIGNED.findall(paragraph):
                    assert number in changes, f"{path.name} quotes {number}; docs/results.md gives {sorted(changes)}"
            for minutes in MINUTES.findall(paragraph):
                minutes = re.sub(r"\s*[-–]\s*", "-", minutes)
                assert minutes in page_minutes(notebook), (
                    f"{path.name} says {minutes} minutes; docs/results.md gives {sorted(page_minutes(notebook))}")
                assert CLASS_NAMED.search(paragraph), (
                    f"{path.name} says {minutes} minutes without naming the CPU class they were measured on")
