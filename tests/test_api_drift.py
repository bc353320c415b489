"""API-drift gate: every trl / openenv / openreward name the notebooks and helpers use exists in the
installed versions. No training; the gate only imports the packages and reads signatures.

With the pins this guards against code written from old tutorials; in CI's weekly "latest" job it is
the first test to say which keyword or module a new release removed.
"""

import pytest

from tools.drift import check_file, check_notebook, default_paths, drift_problems
from tools.notebooks import write_notebook

PATHS = default_paths()


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_repo_uses_only_apis_that_exist(path):
    problems = drift_problems([path])
    assert not problems, "API drift against the installed packages:\n" + "\n".join(problems)


def test_gate_covers_notebooks_helpers_and_envs():
    names = {p.parent.name if p.suffix == ".py" else p.suffix for p in PATHS}
    assert "helpers" in names and any(p.match("envs/*/*.py") or p.match("envs/*/*/*.py") for p in PATHS)


def _notebook(tmp_path, *code_cells):
    cells = [("md", "# t"), ("parameters", "PROFILE = None")] + [("code", c) for c in code_cells]
    return write_notebook(tmp_path / "99_drift.ipynb", cells)


def test_flags_removed_grpo_config_keyword_with_cell_and_line(tmp_path):
    nb = _notebook(tmp_path, "x = 1", "from trl import GRPOConfig\n\nconfig = GRPOConfig(\n"
                   "    output_dir='o',\n    max_prompt_length=256,\n    max_completion_length=64,\n)")
    problems = check_notebook(nb)
    assert len(problems) == 1, problems
    # cells: 0 md, 1 parameters, 2 "x = 1", 3 the config; the bad keyword is on line 5 of that cell
    assert "99_drift.ipynb cell 3, line 5" in problems[0]
    assert "max_prompt_length" in problems[0] and "GRPOConfig" in problems[0] and "trl 1.16" in problems[0]


def test_flags_removed_trl_experimental_openenv_module(tmp_path):
    nb = _notebook(tmp_path, "%pip install -q trl\nfrom trl.experimental.openenv import generate_rollout_completions\n"
                             "out = generate_rollout_completions(trainer, prompts=prompts)")
    problems = check_notebook(nb)
    assert len(problems) == 1, problems  # reported once at the import, not again at the call
    assert "cell 2, line 2" in problems[0] and "trl.experimental.openenv" in problems[0]


def test_flags_imports_attributes_and_trainer_keywords_in_python_files(tmp_path):
    source = tmp_path / "train.py"
    source.write_text(
        "import trl\n"                                                     # 1
        "import trl.experimental.openenv as oe\n"                          # 2
        "from trl import GRPOTrainer, SFTConfig as Cfg\n"                  # 3
        "from openenv.core import NotAnOpenEnvName\n"                      # 4
        "trainer = GRPOTrainer(model='m', environment_factory=f, env_factory=f)\n"  # 5
        "sft = Cfg(assistant_only_loss=True, max_seq_length=128)\n"        # 6
        "cfg = trl.GRPOConfig(use_vllm=True, vllm_mode='server', vllm_server_url='x')\n"  # 7
        "fn = trl.experimental.openenv.generate_rollout_completions\n"     # 8
    )
    problems = check_file(source)
    by_line = {p.split(":")[1]: p for p in problems}
    assert set(by_line) == {"2", "4", "5", "6", "7"}, problems  # line 8: reported at line 2 already
    assert "trl.experimental.openenv" in by_line["2"]
    assert "NotAnOpenEnvName" in by_line["4"] and "openenv" in by_line["4"]
    assert "GRPOTrainer(env_factory=" in by_line["5"] and "environment_factory" not in by_line["5"].split(":")[2]
    assert "SFTConfig(max_seq_length=" in by_line["6"] and "max_length" in by_line["6"]  # the suggestion
    assert "vllm_server_url" in by_line["7"] and "vllm_server_base_url" in by_line["7"]


def test_flags_missing_attribute_reached_through_a_module(tmp_path):
    source = tmp_path / "attr.py"
    source.write_text("import trl\nfrom trl import experimental\nx = trl.experimental.openenv\ny = experimental.nope\n")
    problems = check_file(source)
    assert [p.split(":")[1] for p in problems] == ["3", "4"], problems


def test_current_api_and_guarded_fallbacks_pass(tmp_path):
    source = tmp_path / "ok.py"
    source.write_text(
        "from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer\n"
        "from trl.experimental.openreward import OpenRewardSpec\n"
        "from openenv.core import EnvClient\n"
        "try:\n    from trl.experimental.openenv import generate_rollout_completions\n"
        "except ImportError:\n    generate_rollout_completions = None\n"
        "c = GRPOConfig(output_dir='o', max_completion_length=8, use_cpu=True, bf16=False, num_generations=2,\n"
        "               use_vllm=False, vllm_mode='colocate', report_to='trackio', **extra)\n"
        "s = SFTConfig(output_dir='o', assistant_only_loss=True, max_length=128)\n"
        "t = GRPOTrainer(model='m', args=c, reward_funcs=[f], environment_factory=F, rollout_func=None)\n"
        "u = SFTTrainer(model='m', args=s, train_dataset=d, processing_class=tok)\n"
        "spec = OpenRewardSpec('http://127.0.0.1:1', num_tasks=4)\n"
    )
    assert check_file(source) == []


def test_notebook_cells_are_one_program(tmp_path):
    """The import is in one cell and the bad call three cells later: still caught, at the call's cell."""
    nb = _notebook(tmp_path, "from trl import GRPOTrainer, GRPOConfig", "x = 1", "y = 2",
                   "args = GRPOConfig(output_dir='o')\ntrainer = GRPOTrainer(model='m', args=args,\n"
                   "                      reward_func=[f])")
    problems = check_notebook(nb)
    assert len(problems) == 1 and "cell 5, line 3" in problems[0] and "reward_funcs" in problems[0], problems


def test_unparsable_cell_is_reported_and_the_rest_still_checked(tmp_path):
    nb = _notebook(tmp_path, "def broken(:\n    pass", "from trl import GRPOConfig\nGRPOConfig(max_prompt_length=1)")
    problems = check_notebook(nb)
    assert any("cell 2, line 1: cannot parse" in p for p in problems)
    assert any("cell 3, line 2" in p and "max_prompt_length" in p for p in problems), problems


def test_keywords_passed_through_a_literal_dict_are_checked(tmp_path):
    nb = _notebook(tmp_path, "from trl import GRPOConfig\ncommon = dict(\n    output_dir='o',\n    max_prompt_length=64,\n)",
                   "cfg = {'use_cpu': True, 'num_generation': 4}\nc = GRPOConfig(**common, **cfg, bf16=False)")
    problems = check_notebook(nb)
    assert len(problems) == 2, problems
    assert "cell 2, line 4" in problems[0] and "max_prompt_length" in problems[0]  # reported where the key is
    assert "cell 3, line 1" in problems[1] and "num_generation" in problems[1] and "num_generations" in problems[1]


def test_trls_private_names_that_helpers_rely_on_still_exist_and_a_gone_one_is_named():
    """FastGRPOTrainer overrides two undocumented GRPOTrainer methods; the gate lists each, and fails naming one that
    is gone, takes other parameters, or no longer sets what helpers read."""
    from helpers.compute.fast_trainers import PRIVATE_OVERRIDES
    from tools.drift import PRIVATE_NAMES, private_name_problems

    assert {f"trl.GRPOTrainer.{name}" for name in PRIVATE_OVERRIDES} <= set(PRIVATE_NAMES)
    assert private_name_problems() == []
    problems = private_name_problems({"trl.GRPOTrainer._generate_one_turn": (),
                                      "trl.GRPOTrainer._get_per_token_logps_and_entropies": ("model", "tokens"),
                                      "trl.GRPOTrainer.__init__": "self._rollout_log"})
    assert len(problems) == 3
    assert "_generate_one_turn: gone in trl" in problems[0]
    assert "no longer takes tokens" in problems[1] and "no longer sets self._rollout_log" in problems[2]
