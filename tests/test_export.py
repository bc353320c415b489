"""Notebook -> script export (tools.export) for scale-out with `accelerate launch`.

Unit tests run a small exported notebook as a real script, also under `accelerate launch --cpu` (one process);
every training notebook exports and lists its knobs as flags. tests/test_scale_out.py runs the exported notebooks
01-04 on two processes.
"""

import json
import os
import subprocess
import sys

import pytest

from tools.export import ExportError, export, export_source
from tools.notebooks import INJECTED_PLACEHOLDER, numbered_notebooks, write_notebook

# 00 connects to an environment and trains nothing; 01-04 train, and those are what scale out.
TRAINING = [p for p in numbered_notebooks() if not p.name.startswith("00_")]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no", "--cpu"]

TOY_PARAMETERS = '''\
PROFILE = None        # "tiny" | "cpu" | "gpu"; None = the hardware's
MAX_STEPS = None      # None = the profile's value
MODEL = None          # None = the profile's model;
                      # or a Hub id
LEARNING_RATE = 1e-5
NAME = "run"
PUSH_TO_HUB = False
SIZES = {
    "a": 1,
}
DERIVED = NAME.upper()
'''

TOY_BODY = '''\
%matplotlib inline
import json
from IPython.display import display
display({"shown": "only in a notebook"})
for i in range(1):
    !echo notebook shell
    display(i)
print(json.dumps({"profile": PROFILE, "max_steps": MAX_STEPS, "model": MODEL, "lr": LEARNING_RATE,
                  "name": NAME, "push": PUSH_TO_HUB, "sizes": SIZES, "derived": DERIVED}))
'''


def _toy(tmp_path, *extra_cells):
    cells = [("md", "# Toy export"), ("parameters", TOY_PARAMETERS), ("md", "## Run"), ("code", TOY_BODY)]
    return write_notebook(tmp_path / "01_toy.ipynb", cells + [("code", c) for c in extra_cells])


def _run(args, cwd, timeout=600):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})


def test_parameters_become_flags_with_notebook_defaults(tmp_path):
    script = export(_toy(tmp_path), tmp_path / "toy.py")
    text = script.read_text()
    assert "%matplotlib" not in text.replace("# notebook only: %matplotlib", "")
    assert "pass  # notebook only: !echo notebook shell" in text and "display(i)" not in text
    defaults = _run([sys.executable, str(script)], tmp_path)
    assert defaults.returncode == 0, defaults.stderr
    assert json.loads(defaults.stdout.strip().splitlines()[-1]) == {
        "profile": None, "max_steps": None, "model": None, "lr": 1e-5, "name": "run", "push": False,
        "sizes": {"a": 1}, "derived": "RUN"}
    given = _run([sys.executable, str(script), "--profile", "gpu", "--max-steps", "150", "--model",
                  "Qwen/Qwen3-1.7B", "--learning-rate", "3e-6", "--name", "x", "--push-to-hub",
                  "--sizes", "{'b': 2}"], tmp_path)
    assert given.returncode == 0, given.stderr
    assert json.loads(given.stdout.strip().splitlines()[-1]) == {
        "profile": "gpu", "max_steps": 150, "model": "Qwen/Qwen3-1.7B", "lr": 3e-6, "name": "x", "push": True,
        "sizes": {"b": 2}, "derived": "X"}
    helptext = _run([sys.executable, str(script), "--help"], tmp_path).stdout
    assert "None = the profile's model; or a Hub id" in " ".join(helptext.split())
    assert "--no-push-to-hub" in helptext and "--derived" not in helptext  # not a literal: stays code
    typo = _run([sys.executable, str(script), "--max-step", "3"], tmp_path)
    assert typo.returncode == 2 and "--max-step" in typo.stderr


def test_trl_config_overrides_reach_every_grpo_config(tmp_path):
    cell = ("import trl\nfrom trl import GRPOConfig\n"
            "c = GRPOConfig(output_dir='o', use_cpu=True, bf16=False, report_to='none')\n"
            "import pickle\nassert pickle.loads(pickle.dumps(c)).vllm_mode == c.vllm_mode  # Trainer saves its args\n"
            "print('CONFIG', c.vllm_mode, c.vllm_server_base_url, c.gradient_accumulation_steps, type(c).__mro__[1].__name__)")
    script = export(_toy(tmp_path, cell), tmp_path / "toy.py")
    run = _run([sys.executable, str(script), "--trl-config", "vllm_mode=server", "--trl-config",
                "vllm_server_base_url=http://10.0.0.1:8000", "--trl-config", "gradient_accumulation_steps=8"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "CONFIG server http://10.0.0.1:8000 8 GRPOConfig" in run.stdout
    bad = _run([sys.executable, str(script), "--trl-config", "max_prompt_length=256"], tmp_path)
    assert bad.returncode != 0 and "max_prompt_length" in bad.stderr


def test_top_level_await_is_refused_with_the_cell(tmp_path):
    with pytest.raises(ExportError, match=r"01_toy.ipynb cell 4, line 1: top-level `await`"):
        export_source(_toy(tmp_path, "result = await client.reset()"))


def test_toy_script_runs_under_accelerate_launch(tmp_path):
    script = export(_toy(tmp_path), tmp_path / "toy.py")
    run = _run(ACCELERATE + [str(script), "--max-steps", "2"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["max_steps"] == 2


@pytest.mark.parametrize("notebook", TRAINING, ids=[p.stem for p in TRAINING])
def test_every_training_notebook_exports_to_a_script_with_its_knobs_as_flags(notebook, tmp_path):
    """Cheap for every notebook: the script compiles and its --help lists the notebook's knobs."""
    import papermill

    script = export(notebook, tmp_path / "scripts" / f"{notebook.stem}.py")
    compile(script.read_text(), str(script), "exec")
    run = _run([sys.executable, str(script), "--help"], tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in papermill.inspect_notebook(str(notebook)):
        assert "--" + name.lower().replace("_", "-") in run.stdout, name


# Each training notebook end to end under `accelerate launch`, on two processes: tests/test_scale_out.py.


def test_accelerate_configs_load_with_accelerates_own_reader():
    from accelerate.commands.config.config_args import load_config_from_file

    from tools.notebooks import REPO_ROOT

    expected = {"single_gpu": ("NO", None), "multi_gpu": ("MULTI_GPU", None),
                "deepspeed_zero2": ("DEEPSPEED", 2), "deepspeed_zero3": ("DEEPSPEED", 3)}
    for name, (kind, stage) in expected.items():
        config = load_config_from_file(str(REPO_ROOT / "configs" / "accelerate" / f"{name}.yaml"))
        assert config.distributed_type.value == kind, name
        assert (config.deepspeed_config or {}).get("zero_stage") == stage, name
        assert config.use_cpu is False and config.mixed_precision == "bf16"


TOY_MORE = '''\
# More knobs: the lesson runs without touching them; None means the profile's value.
# A value passed in (papermill -p NAME value, the exported script's --flags) wins over this cell.
MAX_TURNS = None     # tool turns in one rollout
EVAL_SPLIT = "test"  # the held-out split
SAVE_MERGED = False  # also save a merged model
'''

TOY_MORE_BODY = '''\
import json
print(json.dumps({"max_steps": MAX_STEPS, "max_turns": MAX_TURNS, "eval_split": EVAL_SPLIT,
                  "save_merged": SAVE_MERGED}))
'''


def test_more_knobs_become_flags_and_a_passed_flag_wins_over_the_cell(tmp_path):
    path = write_notebook(tmp_path / "01_toy.ipynb", [("md", "# Toy export"), ("parameters", TOY_PARAMETERS),
                                                      ("more-parameters", TOY_MORE), ("injected-parameters", None),
                                                      ("code", TOY_MORE_BODY)])
    script = export(path, tmp_path / "toy.py")
    assert INJECTED_PLACEHOLDER not in script.read_text()   # the placeholder is left out: the flags are the values
    helptext = " ".join(_run([sys.executable, str(script), "--help"], tmp_path).stdout.split())
    for flag, comment in (("--max-turns", "tool turns in one rollout"), ("--eval-split", "the held-out split"),
                          ("--save-merged", "also save a merged model")):
        assert flag in helptext and comment in helptext, flag
    assert "--no-save-merged" in helptext and "--max-steps" in helptext   # the parameters cell's flags stay
    defaults = _run([sys.executable, str(script)], tmp_path)
    assert defaults.returncode == 0, defaults.stderr[-3000:]
    assert json.loads(defaults.stdout.strip().splitlines()[-1]) == {
        "max_steps": None, "max_turns": None, "eval_split": "test", "save_merged": False}
    given = _run([sys.executable, str(script), "--max-turns", "7", "--eval-split", "validation", "--save-merged",
                  "--max-steps", "3"], tmp_path)
    assert given.returncode == 0, given.stderr[-3000:]
    assert json.loads(given.stdout.strip().splitlines()[-1]) == {
        "max_steps": 3, "max_turns": 7, "eval_split": "validation", "save_merged": True}


MORE_CELLS = [p for p in numbered_notebooks()
              if any("more-parameters" in c.get("metadata", {}).get("tags", [])
                     for c in json.loads(p.read_text())["cells"])]


@pytest.mark.parametrize("notebook", MORE_CELLS, ids=[p.stem for p in MORE_CELLS])
def test_every_more_knob_of_a_notebook_is_a_flag_of_its_script(notebook, tmp_path):
    """The "more knobs" cell's knobs keep working from the command line once they leave the parameters cell."""
    from tools.notebooks import cell_source, parameter_names

    names = parameter_names(cell_source(notebook, "more-parameters"))
    assert names, f"{notebook.name}: the more-parameters cell sets no knob"
    script = export(notebook, tmp_path / f"{notebook.stem}.py")
    run = _run([sys.executable, str(script), "--help"], tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    text = script.read_text()
    for name in names:
        assert "--" + name.lower().replace("_", "-") in run.stdout, name
        assert f"{name} = args.{name.lower()}" in text, name   # the cell's line now takes the flag's value
