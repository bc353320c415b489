"""The maintainer's tools, apart from the learner's library in helpers/ (which no file here is imported by).

    python -m tools.colab      regenerate colab/ from notebooks/ (make colab); colab_cells/: the cells it adds
    python -m tools.drift      check the notebooks' trl/transformers/openenv calls against the installed versions
    python -m tools.export     a notebook as a script, for `accelerate launch` (docs/scale-out.md)
    python -m tools.demo       notebooks 02 then 01 with progress and one HTML report (make demo; report.py,
                               trainer_log.py)
    tools.notebooks            the papermill runner and the static gate the tests use

Run them from the repository's root (they read notebooks/); they are not installed with `helpers`.
"""
