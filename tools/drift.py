"""API-drift gate: does every trl / openenv / openreward name this project uses exist in the installed versions?

TRL moves fast (`GRPOConfig(max_prompt_length=...)` and `trl.experimental.openenv` both vanished between
the tutorials and today). This gate reads the code without running it (`ast`) and checks, against the
installed packages:

- every `import` / `from X import Y` of trl, openenv or openreward: the module imports, Y exists;
- every call to one of their classes or functions (GRPOConfig, SFTConfig, GRPOTrainer, SFTTrainer,
  OpenRewardSpec, ...): each keyword argument is a dataclass field (configs) or a parameter of the
  signature (`__init__` for classes), unless the callee takes `**kwargs`;
- every attribute chain through those modules (`trl.experimental.openenv.x`) resolves;
- every private name of TRL's that helpers rely on (`PRIVATE_NAMES`: the methods FastGRPOTrainer overrides, the
  LM head's switch, the trainer's rollout log) still exists, a method with the parameters it is called with
  (docs/upstream-compatibility.md#private-names-of-trl).

    python -m tools.drift            # the whole repo: notebooks, helpers/, tools/, envs/
    python -m tools.drift FILE...    # .ipynb or .py files

A notebook's code cells are checked as one program (an import in one cell names a call in another);
problems name the notebook and cell (or file and line). Imports inside `try: ... except ImportError`
are deliberate fallbacks and are not checked. `**kwargs` is checked when it is a literal dict
(`dict(a=1)` / `{"a": 1}`) assigned once in the same notebook or file; other mappings cannot be seen.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import importlib.metadata
import inspect
import json
import sys
import warnings
from pathlib import Path

from tools.notebooks import REPO_ROOT, numbered_notebooks

WATCHED = ("trl", "openenv", "openreward")
_MISSING = object()


def default_paths() -> list[Path]:
    """What the gate covers: every numbered notebook, helpers/**/*.py, tools/**/*.py and envs/**/*.py."""
    files = (sorted((REPO_ROOT / "helpers").rglob("*.py")) + sorted((REPO_ROOT / "tools").rglob("*.py"))
             + sorted((REPO_ROOT / "envs").rglob("*.py")))
    return list(numbered_notebooks()) + files


def _label(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _version(module: str) -> str:
    root = module.split(".")[0]
    try:
        return f"{root} {importlib.metadata.version(root)}"
    except importlib.metadata.PackageNotFoundError:
        return root


def _watched(dotted: str) -> bool:
    return dotted.split(".")[0] in WATCHED


def _import(module: str):
    """The module, or the exception importing it raised."""
    try:
        with warnings.catch_warnings():  # trl.experimental warns on import; the gate only looks
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except Exception as exc:  # ModuleNotFoundError, or an ImportError inside it
        return exc


def _resolve(dotted: str):
    """The object `dotted` names (importing the longest module prefix first), or _MISSING."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _import(".".join(parts[:cut]))
        if isinstance(module, BaseException):
            continue
        obj = module
        for attr in parts[cut:]:
            nxt = getattr(obj, attr, _MISSING)
            if nxt is _MISSING and inspect.ismodule(obj):  # a submodule not imported yet
                sub = _import(f"{obj.__name__}.{attr}")
                nxt = _MISSING if isinstance(sub, BaseException) else sub
            if nxt is _MISSING:
                return _MISSING
            obj = nxt
        return obj
    return _MISSING


def accepted_keywords(obj) -> set[str] | None:
    """Keyword names `obj(...)` accepts; None when it takes **kwargs (anything goes) or has no signature."""
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        return {f.name for f in dataclasses.fields(obj) if f.init}
    try:
        signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except (TypeError, ValueError):
        return None
    params = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}


def _guarded(node: ast.AST, parents: dict) -> bool:
    """True when `node` sits in a `try` whose handlers catch ImportError (a deliberate fallback)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if any(n is None or (isinstance(n, ast.Name) and n.id in
                                     ("ImportError", "ModuleNotFoundError", "Exception")) for n in names):
                    return True
    return False


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`GRPOConfig` -> "trl.GRPOConfig", `trl.experimental.x` -> "trl.experimental.x" via the file's imports."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(attrs)])


def check_code(code: str, where) -> list[str]:
    """Drift problems in one piece of Python; `where(lineno)` turns a line into a location for messages."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [f"{where(exc.lineno or 1)}: cannot parse ({exc.msg}); the drift gate could not check it"]
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    aliases: dict[str, str] = {}  # local name -> dotted name in a watched package
    broken: set[str] = set()  # dotted names whose import already failed (reported once, not again per use)
    problems = []

    # Imports first (in source order), so calls anywhere in the file know the names.
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))),
                       key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _watched(alias.name):
                    continue
                local = alias.asname or alias.name.split(".")[0]
                aliases[local] = alias.name if alias.asname else local
                if _guarded(node, parents):
                    continue
                module = _import(alias.name)
                if isinstance(module, BaseException):
                    broken.add(alias.name)
                    problems.append(f"{where(node.lineno)}: `import {alias.name}` fails with "
                                    f"{_version(alias.name)}: {type(module).__name__}: {module}")
            continue
        if node.level or not node.module or not _watched(node.module):
            continue
        guarded = _guarded(node, parents)
        module = None if guarded else _import(node.module)
        for alias in node.names:
            local = alias.asname or alias.name
            aliases[local] = f"{node.module}.{alias.name}"
            if guarded or alias.name == "*":
                continue
            if isinstance(module, BaseException):
                broken.add(aliases[local])
                continue
            if _resolve(f"{node.module}.{alias.name}") is _MISSING:
                broken.add(aliases[local])
                near = difflib.get_close_matches(alias.name, dir(module), n=3)
                hint = f" (close: {', '.join(near)})" if near else ""
                problems.append(f"{where(node.lineno)}: `from {node.module} import {alias.name}`: "
                                f"{node.module} has no {alias.name!r} in {_version(node.module)}{hint}")
        if isinstance(module, BaseException):
            problems.append(f"{where(node.lineno)}: `from {node.module} import ...`: module {node.module} "
                            f"does not import with {_version(node.module)} ({type(module).__name__}: {module})")

    literal_dicts = _literal_dicts(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) \
                and not isinstance(parents.get(node), ast.Attribute):
            dotted = _dotted(node, aliases)
            if dotted and not _is_broken(dotted, broken) and _resolve_root(aliases, node) \
                    and _resolve(dotted) is _MISSING:
                problems.append(f"{where(node.lineno)}: `{ast.unparse(node)}` ({dotted}) does not exist in "
                                f"{_version(dotted)}")
        if not isinstance(node, ast.Call) or not node.keywords:
            continue
        dotted = _dotted(node.func, aliases)
        if not dotted or _is_broken(dotted, broken):
            continue
        target = _resolve(dotted)
        if target is _MISSING:
            continue  # reported by the attribute check or the import check
        accepted = accepted_keywords(target)
        if accepted is None:
            continue
        name = getattr(target, "__name__", dotted.rsplit(".", 1)[-1])
        for keyword in _expanded_keywords(node, literal_dicts):
            if keyword.arg and keyword.arg not in accepted:
                near = difflib.get_close_matches(keyword.arg, sorted(accepted), n=3)
                hint = f" (close: {', '.join(near)})" if near else ""
                kind = "field" if dataclasses.is_dataclass(target) else "parameter"
                problems.append(f"{where(keyword.value.lineno)}: {name}({keyword.arg}=...): {name} has no "
                                f"{kind} {keyword.arg!r} in {_version(dotted)}{hint}")
    return problems


def _literal_dicts(tree: ast.AST) -> dict[str, list[ast.keyword]]:
    """Names assigned exactly once to `dict(k=...)` or `{"k": ...}`: their keys, as keywords."""
    found: dict[str, list] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value, keys = node.value, None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" \
                and not value.args and all(k.arg for k in value.keywords):
            keys = value.keywords
        elif isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                 for k in value.keys):
            keys = [ast.keyword(arg=k.value, value=v) for k, v in zip(value.keys, value.values)]
        name = node.targets[0].id
        found[name] = keys if name not in found else None  # assigned twice: not sure which one is used
    return {name: keys for name, keys in found.items() if keys}


def _expanded_keywords(call: ast.Call, literal_dicts: dict) -> list[ast.keyword]:
    """The call's keywords, with `**name` replaced by the keys of a literal dict `name`."""
    out = []
    for keyword in call.keywords:
        if keyword.arg is None and isinstance(keyword.value, ast.Name) and keyword.value.id in literal_dicts:
            out += literal_dicts[keyword.value.id]
        else:
            out.append(keyword)
    return out


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_broken(dotted: str, broken: set[str]) -> bool:
    return any(dotted == b or dotted.startswith(b + ".") for b in broken)


def _resolve_root(aliases: dict, node: ast.AST) -> bool:
    """Only chains that start at a module alias are checked as attributes (not `Config.field` on classes)."""
    root = aliases.get(_root_name(node), "")
    return inspect.ismodule(_resolve(root)) if root else False


def _code_lines_only(source: str) -> str:
    """Blank out IPython magics and shell lines (`%pip`, `!ls`) so the cell parses; line numbers are kept."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def check_notebook(path: str | Path) -> list[str]:
    """Check a notebook's code cells as one program (an import in cell 3 names a call in cell 9)."""
    path = Path(path)
    label = _label(path)
    problems, chunks, starts = [], [], []  # starts: (first line in the joined program, cell index)
    line = 1
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell.get("cell_type") != "code":
            continue
        source = _code_lines_only(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
        try:
            ast.parse(source)
        except SyntaxError as exc:
            problems.append(f"{label} cell {index}, line {exc.lineno}: cannot parse ({exc.msg}); "
                            "the drift gate could not check it")
            continue
        chunks.append(source)
        starts.append((line, index))
        line += source.count("\n") + 2  # the cell, then one blank separator line

    def where(lineno: int) -> str:
        first, index = max(s for s in starts if s[0] <= lineno)
        return f"{label} cell {index}, line {lineno - first + 1}"

    return problems + (check_code("\n\n".join(chunks), where) if chunks else [])


def check_file(path: str | Path) -> list[str]:
    path = Path(path)
    label = _label(path)
    return check_code(path.read_text(), lambda line: f"{label}:{line}")


# TRL's private names helpers rely on -> the parameters a method must still take (None: not a method; a string:
# text its source must hold). The list a TRL upgrade checks first; docs/upstream-compatibility.md says why each.
PRIVATE_NAMES = {
    "trl.GRPOTrainer._generate_single_turn": ("prompt_ids", "images", "multimodal_fields", "num_generations"),
    "trl.GRPOTrainer._get_per_token_logps_and_entropies": ("model", "input_ids", "attention_mask", "logits_to_keep"),
    "trl.GRPOTrainer.compute_loss": ("model", "inputs", "return_outputs", "num_items_in_batch"),
    "trl.trainer.utils._use_triton": None,
    "trl.GRPOTrainer.__init__": "self._logs",
}


def private_name_problems(names=None) -> list[str]:
    """The names of `PRIVATE_NAMES` (or `names`) that are gone, or no longer take the parameters listed."""
    problems = []
    for dotted, expected in (names if names is not None else PRIVATE_NAMES).items():
        obj = _resolve(dotted)
        if obj is _MISSING or obj is None:
            problems.append(f"{dotted}: gone in {_version(dotted.split('.')[0])} (a private name helpers rely on)")
        elif isinstance(expected, str):
            if expected not in inspect.getsource(obj):
                problems.append(f"{dotted} no longer sets {expected} ({_version(dotted.split('.')[0])})")
        elif expected:
            missing = [p for p in expected if p not in inspect.signature(obj).parameters]
            if missing:
                problems.append(f"{dotted} no longer takes {', '.join(missing)} ({_version(dotted.split('.')[0])})")
    return problems


def drift_problems(paths=None) -> list[str]:
    """Every drift problem in `paths` (default: the whole repo, see `default_paths`, and TRL's private names)."""
    problems = [] if paths is not None else private_name_problems()
    for path in map(Path, paths if paths is not None else default_paths()):
        problems += check_notebook(path) if path.suffix == ".ipynb" else check_file(path)
    return problems


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:]) or None
    problems = drift_problems(paths)
    for problem in problems:
        print(problem)
    versions = ", ".join(_version(m) for m in WATCHED)
    print(f"{len(problems)} API-drift problem(s) against {versions}" if problems else
          f"No API drift against {versions}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
