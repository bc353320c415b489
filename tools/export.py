"""Export a notebook to a plain Python script, to train at scale with `accelerate launch`.

    python -m tools.export notebooks/01_grpo_walkthrough.ipynb -o runs/scripts/01_grpo_walkthrough.py
    accelerate launch --config_file configs/accelerate/multi_gpu.yaml \\
        runs/scripts/01_grpo_walkthrough.py --profile gpu --max-steps 150

The notebook stays the source of truth; scripts are generated on demand (runs/ is not committed).
What changes on the way:
- the `parameters` cell and the "more knobs" cell below it become command-line flags (`MAX_STEPS` ->
  `--max-steps`), each with the notebook's default (None stays None: "the profile's value") and its
  comment as help. Values are read as Python literals (150, 1e-5, None, [1, 2]) and otherwise as text
  (Qwen/Qwen3-1.7B); booleans take `--push-to-hub` / `--no-push-to-hub`. The `injected-parameters`
  placeholder below them (where papermill puts the values it passes) is left out: the flags are those values;
- IPython magics and shell lines (`%pip`, `!ls`) and `display(...)` statements are dropped, and
  matplotlib draws off-screen (plots are still saved as PNG in the run folder);
- `--trl-config KEY=VALUE` (repeatable) sets a field on every `trl.GRPOConfig` / `trl.SFTConfig` the
  script builds, for what only matters at scale (`use_vllm=true`, `vllm_mode=server`,
  `vllm_server_base_url=...`, `gradient_accumulation_steps=8`, ...). See docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from tools.notebooks import INJECTED, REPO_ROOT

PREAMBLE = '''\
#!/usr/bin/env python
# Generated from {source} by `python -m tools.export`; regenerate it, do not edit it.
"""{title}

Exported from {source}. Run it on one process or many:

    python {script} --help
    accelerate launch {script} --profile gpu
    accelerate launch --config_file configs/accelerate/multi_gpu.yaml {script} --profile gpu
"""

import argparse
import ast
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")  # no screen: figures are drawn off-screen and saved as PNG


def _literal(text):
    """A flag's value: a Python literal (150, 1e-5, None, [1, 2]), true/false, or else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {{"true": True, "false": False}}.get(text.lower(), text)


def _override_trl_configs(pairs):
    """--trl-config KEY=VALUE: set KEY on every trl.GRPOConfig / trl.SFTConfig this script builds."""
    if not pairs:
        return
    import dataclasses

    import trl

    overrides = {{}}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--trl-config takes KEY=VALUE, not {{pair!r}}")
        overrides[key.strip()] = _literal(value.strip())
    known = set()
    for name in ("GRPOConfig", "SFTConfig"):
        base = getattr(trl, name)
        fields = {{f.name for f in dataclasses.fields(base) if f.init}}
        known |= fields
        mine = {{k: v for k, v in overrides.items() if k in fields}}

        def __init__(self, *args, _base=base, _mine=mine, **kwargs):
            _base.__init__(self, *args, **{{**kwargs, **_mine}})

        # A module-level name, so pickle (Trainer saves its args with torch.save) finds the class again.
        qualname = f"_Overridden{{name}}"
        overridden = type(name, (base,), {{"__init__": __init__, "__module__": __name__, "__qualname__": qualname}})
        setattr(sys.modules[__name__], qualname, overridden)
        setattr(trl, name, overridden)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise SystemExit(f"--trl-config: no GRPOConfig/SFTConfig field named {{unknown}} in trl {{trl.__version__}}")
    print("trl config overrides:", overrides)


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)  # a typo in a flag fails instead of guessing
{arguments}
parser.add_argument("--trl-config", metavar="KEY=VALUE", action="append", default=[],
                    help="set a field on every GRPOConfig/SFTConfig the script builds (repeatable)")
args = parser.parse_args()
_override_trl_configs(args.trl_config)
'''


class ExportError(ValueError):
    """The notebook cannot become a script (the message says which cell and why)."""


def _cell_source(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _flag(name: str) -> str:
    return "--" + name.lower().replace("_", "-")


def _argument(name: str, value, comment: str) -> str:
    """The `parser.add_argument(...)` line for one knob."""
    help_text = (comment + " " if comment else "") + "(default: %(default)r)"
    help_text = help_text.replace("%", "%%").replace("%%(default)r", "%(default)r")
    if isinstance(value, bool):
        how = "action=argparse.BooleanOptionalAction"
    elif isinstance(value, (int, float, str)):
        how = f"type={type(value).__name__}"
    else:  # None (the profile's value), lists, dicts: a Python literal, or text
        how = "type=_literal"
    return (f"parser.add_argument({_flag(name)!r}, dest={name.lower()!r}, {how}, default={value!r},\n"
            f"                    help={help_text!r})")


def split_parameters(source: str) -> tuple[list[str], list[str]]:
    """(argparse lines, code lines) for a parameters cell: literal knobs become flags read from `args`."""
    tree = ast.parse(source)
    lines = source.splitlines()
    arguments, replaced, dropped = [], {}, set()
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        try:
            value = ast.literal_eval(stmt.value)
        except ValueError:
            continue  # not a literal: kept as code
        name = stmt.targets[0].id
        rest = lines[stmt.end_lineno - 1][stmt.end_col_offset:].strip()
        comment = rest[1:].strip() if rest.startswith("#") else ""
        following = stmt.end_lineno
        while following < len(lines) and re.match(r"\s+#", lines[following]):  # continued comments
            comment += " " + lines[following].strip()[1:].strip()
            dropped.add(following)
            following += 1
        arguments.append(_argument(name, value, comment))
        replaced[stmt.lineno - 1] = f"{name} = args.{name.lower()}"
        dropped.update(range(stmt.lineno, stmt.end_lineno))
    code = [replaced.get(i, line) for i, line in enumerate(lines) if i not in dropped or i in replaced]
    return arguments, code


def strip_notebook_only(source: str, where: str) -> str:
    """Drop IPython magics, shell lines and `display(...)` statements; line count and indentation are kept."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            indent = line[: len(line) - len(stripped)]
            line = f"{indent}pass  # notebook only: {stripped}" if indent else f"# notebook only: {stripped}"
        lines.append(line)
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as exc:
        raise ExportError(f"{where}: not valid Python once magics are removed ({exc.msg}, line {exc.lineno})")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)) and not _inside_async_def(tree, node):
            raise ExportError(f"{where}, line {node.lineno}: top-level `await` works in a notebook, not in a "
                              "script; use the client's `.sync()` wrapper instead")
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "display":
            first = lines[node.lineno - 1]
            indent = first[: len(first) - len(first.lstrip())]
            lines[node.lineno - 1] = f"{indent}pass  # notebook only: display(...)"
            for i in range(node.lineno, node.end_lineno):
                lines[i] = ""
    return "\n".join(lines)


def _inside_async_def(tree: ast.AST, target: ast.AST) -> bool:
    return any(target in ast.walk(fn) for fn in ast.walk(tree) if isinstance(fn, ast.AsyncFunctionDef))


def export_source(notebook: str | Path, script_path: str | Path = "SCRIPT.py") -> str:
    """The text of the script exported from `notebook`."""
    notebook = Path(notebook)
    cells = json.loads(notebook.read_text())["cells"]
    try:
        label = str(notebook.resolve().relative_to(REPO_ROOT))
    except ValueError:
        label = notebook.name
    title = next((line[2:].strip() for cell in cells if cell["cell_type"] == "markdown"
                  for line in _cell_source(cell).splitlines() if line.startswith("# ")), notebook.stem)
    arguments, body = None, []
    for index, cell in enumerate(cells):
        source = _cell_source(cell)
        if cell["cell_type"] == "markdown":
            headings = [f"# {line}" for line in source.splitlines() if line.startswith("## ")]
            body += [""] + headings if headings else []
            continue
        if cell["cell_type"] != "code" or not source.strip():
            continue
        code = strip_notebook_only(source, f"{label} cell {index}")
        tags = cell.get("metadata", {}).get("tags", [])
        if "parameters" in tags:
            arguments, lines = split_parameters(code)
            body += ["", f"# %% cell {index}: the parameters, from the command line", *lines]
        elif "more-parameters" in tags:
            more, lines = split_parameters(code)
            arguments = (arguments or []) + more
            body += ["", f"# %% cell {index}: more knobs, from the command line", *lines]
        elif INJECTED in tags:
            continue   # papermill's placeholder: the flags above are the values passed
        else:
            body += ["", f"# %% cell {index}", code]
    if arguments is None:
        raise ExportError(f"{label}: no cell tagged 'parameters', so there is nothing to turn into flags")
    head = PREAMBLE.format(source=label, title=title.replace('"""', "'''"), script=script_path,
                           arguments="\n".join(arguments))
    return head + "\n".join(body).rstrip() + "\n"


def export(notebook: str | Path, output: str | Path | None = None) -> Path:
    """Write the script for `notebook` (default runs/scripts/<name>.py) and return its path."""
    notebook = Path(notebook)
    output = Path(output) if output else Path("runs") / "scripts" / f"{notebook.stem}.py"
    text = export_source(notebook, output)
    compile(text, str(output), "exec")  # a broken export fails here, not on a cluster
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    return output


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", help="e.g. notebooks/01_grpo_walkthrough.ipynb")
    parser.add_argument("-o", "--output", help="where to write the script (default: runs/scripts/<name>.py)")
    args = parser.parse_args(argv)
    try:
        path = export(args.notebook, args.output)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}\nrun it with: accelerate launch {path} --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
