"""docs/reference-runs/: every notebook's executed reference run is kept, linked from the notebook, small, and
indexed from its record (tools/reference_runs.py)."""

from __future__ import annotations

import json

import nbformat
import pytest

from tools import reference_runs
from tools.notebooks import numbered_notebooks

NOTEBOOKS = numbered_notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_links_its_kept_reference_run(path):
    first = nbformat.read(path, as_version=4).cells[0].source
    link = f"../docs/reference-runs/{path.stem}.html"
    assert link in first, f"{path.name}'s first cell should link its reference run ({link})"
    records = json.loads(reference_runs.RECORDS.read_text())
    assert path.stem in records, f"no reference run of {path.stem}: python -m tools.reference_runs --notebooks {path.stem}"
    page = (reference_runs.OUT_DIR / f"{path.stem}.html").read_text()
    assert "jp-OutputArea-output" in page, "a reference run shows its outputs"


def test_the_kept_runs_and_their_index_are_fresh():
    assert reference_runs.stale() == []


def _executed(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('step 1 reward 0.5')")])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="step 1 reward 0.5\n"),
        nbformat.v4.new_output("display_data", data={"text/html": '<iframe src="http://127.0.0.1:7860/?token=x">'}),
        nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "a"},
                                                     "text/plain": "  0%|"}),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_a_kept_run_loses_what_only_worked_while_its_kernel_ran(tmp_path):
    record = reference_runs.keep("00_demo", _executed(tmp_path), {"seconds": 60}, out_dir=tmp_path / "out")
    page = (tmp_path / "out" / "00_demo.html").read_text()
    assert "step 1 reward 0.5" in page and "live dashboard" in page   # the iframe replaced by a line
    assert "127.0.0.1:7860" not in page and "widget-view" not in page      # ... and the widget dropped
    assert list(record["bytes"]) == ["00_demo.html"] and not list((tmp_path / "out").glob("*.ipynb"))


def test_a_page_over_the_limit_is_refused_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(reference_runs, "MAX_BYTES", 100)
    with pytest.raises(SystemExit, match="over"):
        reference_runs.keep("00_demo", _executed(tmp_path), {"seconds": 60}, out_dir=tmp_path / "out")
    assert not list((tmp_path / "out").glob("00_demo.*"))


def test_the_index_is_generated_from_the_records_and_a_missing_page_is_found(tmp_path):
    records = {"02_sft_warmup": {"seconds": 300, "machine": "a CPU, 2 cores", "date": "2026-11-28", "commit": "abc1234",
                                 "load_before": 0.1, "load_after": 1.9}}
    runs = [{"notebook": "02_sft_warmup", "hardware": "cpu-avx512", "profile": "cpu", "wall_s": 300, "change": -1.25,
             "ci": [-4.0, 1.5], "metric": "held-out accuracy, 100 sums", "timing": "idle",
             "recipe": {"n_episodes": 320}},
            {"notebook": "02_sft_warmup", "hardware": "cpu-avx512", "profile": "cpu", "wall_s": 280, "change": 50.0,
             "ci": [40.0, 60.0], "metric": "held-out accuracy, 100 sums", "timing": "idle"}]
    (tmp_path / "runs.json").write_text(json.dumps(records))
    (tmp_path / "README.md").write_text(reference_runs.index(records, runs))
    row = next(line for line in reference_runs.index(records, runs).splitlines() if line.startswith("| 02_sft"))
    # a run that lost points is shown as it came out, with the page's range over the class's runs beside it
    assert row.startswith("| 02_sft_warmup | [02_sft_warmup.html](02_sft_warmup.html) | 5.0 | -1.3 [-4.0, +1.5] "
                          "(held-out accuracy, 100 sums) | mean +24.4 (-1.3 to +50.0), 2 runs on `cpu-avx512` |"), row
    assert any("02_sft_warmup.html missing" in p for p in reference_runs.stale(tmp_path, runs))
    (tmp_path / "02_sft_warmup.html").write_text("<html></html>")
    assert reference_runs.stale(tmp_path, runs) == []
    assert any("not recorded in docs/runs.json" in p for p in reference_runs.stale(tmp_path, runs[1:]))
    (tmp_path / "02_sft_warmup.ipynb").write_text("{}")
    assert any("notebook with outputs" in p for p in reference_runs.stale(tmp_path, runs))
    (tmp_path / "02_sft_warmup.ipynb").unlink()
    (tmp_path / "README.md").write_text("edited by hand")
    assert any("does not match" in p for p in reference_runs.stale(tmp_path, runs))


def test_the_commit_is_marked_for_changes_outside_the_pages_this_command_writes(tmp_path, monkeypatch):
    """Each notebook's record names the commit that ran; the pages the earlier notebooks of the same command wrote
    into docs/reference-runs/ are not a change to the code (every record after the first said so before)."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       check=True, capture_output=True)

    (tmp_path / "docs" / "reference-runs").mkdir(parents=True)
    (tmp_path / "docs" / "reference-runs" / "runs.json").write_text("{}")
    (tmp_path / "helpers.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "start")
    monkeypatch.setattr(reference_runs, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(reference_runs, "OUT_DIR", tmp_path / "docs" / "reference-runs")
    (tmp_path / "docs" / "reference-runs" / "runs.json").write_text('{"00": {}}')
    assert "uncommitted" not in reference_runs.commit()
    (tmp_path / "helpers.py").write_text("x = 2\n")
    assert reference_runs.commit().endswith(" (with uncommitted changes)")


def test_a_cpu_is_named_by_the_vector_units_that_decide_its_precision():
    """A Xeon that exposes AVX-512 but not its BF16 trains in fp32: it is named so, not "AVX2 only" (it once was)."""
    from tools.reference_runs import vector_units

    avx2 = {"sse4_2", "avx", "avx2", "fma"}
    assert vector_units(avx2 | {"avx512f", "avx512bw", "avx512_bf16"}) == "AVX-512 BF16"
    assert vector_units(avx2 | {"avx512f", "avx512bw", "avx512_vnni"}) == "AVX-512 without BF16"
    assert vector_units(avx2) == "AVX2 only" and vector_units({"sse4_2"}) == "no AVX2"
