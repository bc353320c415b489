"""helpers/ in layers (issue 73, item 4): a module imports only its own layer or a lower one, with no circle of
imports, no helpers import inside a function, and no code but imports in an __init__.py.

The layer order is helpers/__init__.py's docstring as a table. Every exception is named below with its reason; an
entry that no longer matches anything fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layer of each module or package, bottom first; the longest matching prefix counts.
LAYERS = {
    "helpers": 1, "helpers.startup": 1, "helpers.secrets": 1, "helpers.prompts": 1, "helpers.recipes": 1,
    "helpers.progress": 1, "helpers.runs": 1, "helpers.model_folders": 1,
    "helpers.compute": 2,
    "helpers.models": 3, "helpers.servers": 3, "helpers.profiles": 3,
    "helpers.reporting": 4, "helpers.rollouts": 4,
    "helpers.chain_sum": 5, "helpers.wordle": 5, "helpers.openreward": 5,
}

# (importing module, imported module): an import that runs up the layers.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

# (importing module, imported module): a helpers import inside a function.
INNER_ALLOWED: dict[tuple[str, str], str] = {}

# Packages whose __init__.py still holds code (not only imports).
INIT_CODE_ALLOWED: dict[str, str] = {}


def modules(root: Path) -> dict[str, Path]:
    """Every module under root/helpers by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((root / "helpers").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer(module: str) -> int | None:
    """The layer of `module`; "helpers" names the package's own __init__.py only."""
    prefixes = [p for p in LAYERS if module == p or (p != "helpers" and module.startswith(p + "."))]
    return LAYERS[max(prefixes, key=len)] if prefixes else None


def _inside_function(node, parents) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def imports(root: Path) -> list[tuple[str, str, bool]]:
    """(importing module, imported helpers module, inside a function) for every helpers import."""
    known = modules(root)
    found = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:   # relative: resolved against this module's package
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                if base != "helpers" and not base.startswith("helpers."):
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name == "helpers" or a.name.startswith("helpers.")]
            else:
                continue
            inner = _inside_function(node, parents)
            found += [(name, target, inner) for target in dict.fromkeys(targets)]
    return found


def cycles(root: Path) -> list[list[str]]:
    """The circles of imports among helpers modules (strongly connected components of more than one module)."""
    known = modules(root)
    graph = {name: set() for name in known}
    for source, target, _ in imports(root):
        if target in known and target != source:
            graph[source].add(target)
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def init_code(root: Path) -> dict[str, list[int]]:
    """Line numbers of statements in each __init__.py that are not imports, the docstring or __all__."""
    found = {}
    for name, path in modules(root).items():
        if path.name != "__init__.py":
            continue
        body = ast.parse(path.read_text()).body
        lines = [s.lineno for s in body
                 if not isinstance(s, (ast.Import, ast.ImportFrom))
                 and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                 and not (isinstance(s, ast.Assign) and [getattr(t, "id", None) for t in s.targets] == ["__all__"])]
        if lines:
            found[name] = lines
    return found


def problems(root: Path) -> list[str]:
    """Every layer rule broken under root/helpers, allowlisted ones aside, plus allowlist entries that match nothing."""
    found, seen_upward, seen_inner = [], set(), set()
    for name in modules(root):
        if layer(name) is None:
            found.append(f"{name} has no layer: add it to LAYERS (and to helpers/__init__.py's docstring)")
    for source, target, inner in imports(root):
        upward = (layer(target) or 0) > (layer(source) or 0)
        if upward and (source, target) in UPWARD_ALLOWED:
            seen_upward.add((source, target))
        elif upward:
            found.append(f"upward import: {source} (layer {layer(source)}) imports {target} (layer {layer(target)})")
        if inner and (source, target) in INNER_ALLOWED:
            seen_inner.add((source, target))
        elif inner:
            found.append(f"helpers import inside a function: {source} imports {target}")
    found += [f"circle of imports: {' -> '.join(c)}" for c in cycles(root)]
    code = init_code(root)
    found += [f"code in {name}/__init__.py (lines {lines}): move it into a named module"
              for name, lines in code.items() if name not in INIT_CODE_ALLOWED]
    if root == ROOT:   # a stale exception is an error too, so the allowlists only shrink
        found += [f"UPWARD_ALLOWED {pair} no longer happens: remove it" for pair in set(UPWARD_ALLOWED) - seen_upward]
        found += [f"INNER_ALLOWED {pair} no longer happens: remove it" for pair in set(INNER_ALLOWED) - seen_inner]
        found += [f"INIT_CODE_ALLOWED {name} holds no code now: remove it" for name in set(INIT_CODE_ALLOWED) - set(code)]
    return found


def test_helpers_keeps_its_layers():
    assert problems(ROOT) == []


def test_the_docstring_lists_every_layer():
    """helpers/__init__.py's docstring names the base modules and the packages of each layer."""
    import helpers

    for name in LAYERS:
        if name != "helpers":
            assert name.split(".")[-1] in helpers.__doc__, name


def _write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "helpers/__init__.py": '"""doc"""\nfrom helpers.startup import THREADS_IN_EFFECT\n',
    "helpers/startup.py": "THREADS_IN_EFFECT = True\n",
    "helpers/compute/__init__.py": "",
    "helpers/compute/hardware.py": "from helpers.startup import THREADS_IN_EFFECT\n",
    "helpers/reporting/__init__.py": "from helpers.reporting.plots import draw\n",
    "helpers/reporting/plots.py": "from helpers.compute import hardware\n\ndef draw():\n    import torch\n",
}


def test_a_clean_tree_passes(tmp_path):
    assert problems(_write(tmp_path, CLEAN)) == []


@pytest.mark.parametrize("planted, said", [
    ({"helpers/compute/hardware.py": "from helpers.reporting.plots import draw\n"},
     "upward import: helpers.compute.hardware (layer 2) imports helpers.reporting.plots (layer 4)"),
    ({"helpers/compute/hardware.py": "def f():\n    from helpers.startup import THREADS_IN_EFFECT\n"},
     "helpers import inside a function: helpers.compute.hardware imports helpers.startup"),
    ({"helpers/compute/hardware.py": "def f():\n    import helpers.startup\n"},
     "helpers import inside a function: helpers.compute.hardware imports helpers.startup"),
    ({"helpers/compute/precision.py": "from helpers.compute import hardware\n",
      "helpers/compute/hardware.py": "from helpers.compute.precision import x\n"},
     "circle of imports: helpers.compute.hardware -> helpers.compute.precision"),
    ({"helpers/reporting/__init__.py": "from helpers.reporting.plots import draw\nRUNS = draw()\n"},
     "code in helpers.reporting/__init__.py (lines [2])"),
    ({"helpers/elsewhere.py": ""}, "helpers.elsewhere has no layer"),
])
def test_a_planted_violation_fails(tmp_path, planted, said):
    found = problems(_write(tmp_path, {**CLEAN, **planted}))
    assert any(said in line for line in found), found
