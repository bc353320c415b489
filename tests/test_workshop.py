"""docs/workshop.md, the instructor's page: its minutes quote docs/results.md (as tests/test_results.py checks the
README's and the guide's), its agenda fills three hours, and README links it."""

from __future__ import annotations

import re

from tests.test_results import page_minutes
from tools import results

PAGE = (results.REPO_ROOT / "docs" / "workshop.md").read_text()
CLAIM = re.compile(r"notebook (0\d)(?: takes| took)?(?: ~| about| up to)? (~?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?)(?![\d.])",
                   re.I)


def test_every_minutes_claim_quotes_the_results_page():
    found = CLAIM.findall(PAGE)
    assert {nb for nb, _ in found} >= {"01", "02", "03", "04"}, found
    for nb, minutes in found:
        notebook = next(n for n in results.NOTEBOOKS if n.startswith(nb))
        assert minutes.lstrip("~") in page_minutes(notebook), (
            f"docs/workshop.md: notebook {nb} takes {minutes}, docs/results.md gives {sorted(page_minutes(notebook))}")


def test_the_agenda_uses_the_shipped_idle_minutes_of_an_avx512_cpu():
    records = results.load_runs()["runs"]
    for notebook in results.NOTEBOOKS:
        idle = results.shipped_summary(records, notebook, "cpu-avx512")["idle_minutes"]
        assert f"notebook {notebook[:2]} takes {results.fmt_range(*idle)} minutes" in PAGE, notebook


def test_the_agenda_fills_three_hours_and_each_run_fits_its_slot_on_every_cpu_class():
    """Each slot holds its notebook on both CPU classes the page lists (the AVX-512 figure in the second column, the
    AVX2 one in the fourth), or the AVX2 column says what to run there instead."""
    slots = re.findall(r"^\| (\d):(\d\d)-(\d):(\d\d) \| (.*)$", PAGE, re.M)
    starts = [int(a) * 60 + int(b) for a, b, _, _, _ in slots]
    ends = [int(c) * 60 + int(d) for _, _, c, d, _ in slots]
    assert starts[0] == 0 and ends[-1] == 180 and starts[1:] == ends[:-1]
    trained = 0
    for start, end, (*_, row) in zip(starts, ends, slots):
        screen, _, avx2 = [c.strip() for c in row.rstrip(" |").split(" | ")]
        for column in (screen, avx2):
            said = re.search(r"takes (?:up to )?(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))? minutes", column)
            if said:
                assert float(said.group(2) or said.group(1)) <= end - start, row
        if "takes" in screen:
            trained += 1
            assert re.search(r"takes (?:about |up to )?[\d.-]+ minutes", avx2) or "instead" in avx2, row
    assert trained == 4


def test_numbers_not_on_the_results_page_are_labelled_estimates():
    assert "notebook 00" not in PAGE.lower() or re.search(r"Notebook 00[^|]*\*estimate\*", PAGE)
    assert "*estimated, not measured*" in PAGE and "TEMPERATURE" not in PAGE


def test_the_avx2_laptop_minutes_are_quoted_from_the_page():
    """What an AVX2 laptop's notebook 01 takes with its slow-CPU recipe: the page's shipped `cpu-avx2` row."""
    s = results.shipped_summary(results.load_runs()["runs"], "01_grpo_walkthrough", "cpu-avx2")
    figure = results.fmt_range(*s["idle_minutes"]) if s["idle_minutes"] else results.fmt_minutes(s["other_minutes"])
    assert "notebook 01 takes its slow-CPU recipe by itself" in " ".join(PAGE.split())
    assert re.search(rf"slow-CPU recipe by itself \([^)]*\) and (?:about|up to) {figure} minutes", " ".join(PAGE.split()))


def test_readme_links_the_page_in_one_line():
    readme = (results.REPO_ROOT / "README.md").read_text()
    lines = [line for line in readme.splitlines() if "docs/workshop.md" in line]
    assert len(lines) == 1 and lines[0].startswith("- [docs/workshop.md](docs/workshop.md)")
    assert readme.index(lines[0]) > readme.index("## Where to go next")


def test_the_mac_section_names_what_is_not_measured():
    mac = PAGE.split("## macOS and Apple Silicon", 1)[1]
    assert "tests/test_macos.py" in mac and "Not measured:" in mac and "macOS 14" in mac
