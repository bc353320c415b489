"""Should this run generate with vLLM? One answer for every notebook, and what to do when it is no.

    settings.use_vllm = decide_use_vllm(settings.use_vllm, explicit=USE_VLLM, cuda=torch.cuda.is_available())

vLLM needs a CUDA GPU and a vLLM release inside the range the installed TRL accepts (TRL 1.16:
0.22.0-0.31.0, read from trl's own `[vllm]` extra). When either is missing, a profile that merely
*prefers* vLLM (the gpu profiles) prints why and generates with transformers instead; an explicit
USE_VLLM=True raises with the same explanation. VLLM_INSTALL is the recipe measured to resolve with
this project's pins, two of them moved (see docs/scale-out.md for the measurements).
"""

from __future__ import annotations

import importlib.metadata
import re

from packaging.specifiers import SpecifierSet
from packaging.version import Version

# The vLLM in TRL 1.16's range that installs beside requirements.txt with the fewest pins moved (docs/scale-out.md).
VLLM_INSTALL = 'pip install "vllm==0.29.0" "fastapi==0.136.1" "numpy==2.3.5"'


class VllmUnavailable(RuntimeError):
    """USE_VLLM=True was asked for explicitly, but vLLM cannot run here; the message says what to do."""


def trl_vllm_range() -> SpecifierSet:
    """The vLLM versions the installed TRL accepts, from its `[vllm]` extra (e.g. >=0.22.0,<=0.31.0)."""
    for requirement in importlib.metadata.requires("trl") or []:
        name, _, marker = requirement.partition(";")
        if re.match(r"vllm\s*[<>=!~]", name.strip()) and "extra" in marker:
            return SpecifierSet(name.strip()[len("vllm"):].strip().strip("()"))
    return SpecifierSet()


def _installed_vllm() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_problems(cuda: bool) -> list[str]:
    """Why vLLM cannot generate here (empty: it can)."""
    problems = [] if cuda else ["there is no CUDA GPU"]
    version = _installed_vllm()
    allowed = trl_vllm_range()
    if version is None:
        problems.append("the vllm package is not installed")
    elif Version(Version(version).base_version) not in allowed:
        problems.append(f"vllm {version} is installed, but trl {importlib.metadata.version('trl')} "
                        f"accepts vllm{allowed} only")
    return problems


def decide_use_vllm(wanted: bool, *, explicit: bool = False, cuda: bool) -> bool:
    """True when the run should use vLLM: `wanted` and nothing is missing.

    `explicit` (the notebook's USE_VLLM was set to True): a missing piece raises VllmUnavailable.
    Otherwise (the profile's default) it prints what is missing and returns False, so the notebook
    continues with transformers generation.
    """
    if not wanted:
        return False
    problems = vllm_problems(cuda)
    if not problems:
        return True
    how = (f"To generate with vLLM: a CUDA GPU and `{VLLM_INSTALL}` "
           f"(it moves the fastapi and numpy pins; see docs/scale-out.md), then restart the kernel.")
    if explicit:
        raise VllmUnavailable(f"USE_VLLM=True, but {' and '.join(problems)}. {how} Or set USE_VLLM=False.")
    print(f"vLLM not used: {' and '.join(problems)}. Generating with transformers instead (use_vllm=False). {how}")
    return False
