"""Offline NLTK data for TextArena's word games, built from files textarena itself ships.

TextArena's Wordle needs two NLTK resources and downloads them at import time:
the `words` corpus (a word list) and the `averaged_perceptron_tagger_eng` POS tagger (used once,
to keep only nouns as secret words). Offline that download fails. This module writes a small,
deterministic stand-in from textarena's own hunspell dictionaries (en_US.dic / en_GB.dic):

    corpora/words/en        every lowercase alphabetic word of both dictionaries (validity check)
    corpora/words/en-basic  five-letter countable nouns found in both dictionaries (hunspell
                            flags M and S: possessive and plural), the pool of secret words
    taggers/averaged_perceptron_tagger_eng/
                            a trivial tagger that tags every word "NN" (the list is nouns already)

`use_offline_nltk()` builds it once (into a cache folder), points NLTK at it and replaces
`nltk.download` with a local check, so nothing ever tries the network. Call it before
`import textarena`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

DATA_VERSION = "v1"  # bump when the recipe below changes
TAGGER = "averaged_perceptron_tagger_eng"


class OfflineNLTKError(RuntimeError):
    """Something asked NLTK for data that the offline folder does not have."""


def data_dir() -> Path:
    """Where the folder lives: $TEXTARENA_NLTK_DATA, else <cache>/nltk_data-<version>."""
    explicit = os.environ.get("TEXTARENA_NLTK_DATA")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("AGENT_RL_CACHE") or Path.home() / ".cache" / "agent-rl-notebooks"
    return Path(cache) / f"nltk_data-{DATA_VERSION}"


def _textarena_dictionaries() -> Path:
    """textarena/envs/utils/data, located without importing textarena (its import needs NLTK)."""
    spec = importlib.util.find_spec("textarena")
    if spec is None or not spec.submodule_search_locations:
        raise OfflineNLTKError("textarena is not installed: pip install textarena==0.7.4")
    folder = Path(list(spec.submodule_search_locations)[0]) / "envs" / "utils" / "data"
    if not (folder / "en_US.dic").exists():
        raise OfflineNLTKError(f"textarena's dictionaries are missing from {folder}")
    return folder


def _read_dic(path: Path) -> dict[str, str]:
    """hunspell .dic -> {word: flags}; the first line is a count."""
    entries = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[1:]:
        word, _, flags = line.strip().partition("/")
        if word:
            entries[word] = flags
    return entries


def word_lists() -> tuple[list[str], list[str]]:
    """(en, en_basic): the two word lists, sorted, from textarena's dictionaries."""
    folder = _textarena_dictionaries()
    us, gb = _read_dic(folder / "en_US.dic"), _read_dic(folder / "en_GB.dic")

    def plain(word: str) -> bool:
        return word.isascii() and word.isalpha() and word.islower()

    en = sorted({w for w in (*us, *gb) if plain(w)})
    basic = sorted(
        w for w in us
        if plain(w) and len(w) == 5 and w in gb and "M" in us[w] and "S" in us[w]
    )
    return en, basic


def build(target: Path) -> Path:
    """Write the folder at `target` (atomically: a half-written folder is never used)."""
    en, basic = word_lists()
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    words = tmp / "corpora" / "words"
    words.mkdir(parents=True)
    (words / "en").write_text("\n".join(en) + "\n", encoding="ascii")
    (words / "en-basic").write_text("\n".join(basic) + "\n", encoding="ascii")
    (words / "README").write_text(
        "Built offline by textarena_env.offline_nltk from textarena's hunspell dictionaries.\n")
    tagger = tmp / "taggers" / TAGGER
    tagger.mkdir(parents=True)
    for suffix, content in (("weights", {}), ("tagdict", {}), ("classes", ["NN"])):
        (tagger / f"{TAGGER}.{suffix}.json").write_text(json.dumps(content))
    (tmp / "READY").write_text(DATA_VERSION)
    try:
        tmp.rename(target)
    except OSError:  # another process finished first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "READY").exists():
            raise
    return target


def _guard_downloads(root: Path) -> None:
    """Replace nltk.download: succeed when the resource is in `root`, else raise (never fetch)."""
    import nltk

    known = {"words": root / "corpora" / "words", TAGGER: root / "taggers" / TAGGER}

    def offline_download(info_or_id=None, *args, **kwargs):
        name = getattr(info_or_id, "id", info_or_id)
        if name in known and known[name].exists():
            return True
        raise OfflineNLTKError(
            f"NLTK tried to download {name!r}, but this environment runs offline and only "
            f"provides {sorted(known)} (folder {root}). Add the resource there, or set "
            f"NLTK_DATA to a folder that has it."
        )

    offline_download.__doc__ = "Offline stand-in for nltk.download (see textarena_env.offline_nltk)."
    nltk.download = offline_download


def use_offline_nltk() -> Path:
    """Build the folder if needed, put it first on NLTK's path and block downloads; idempotent."""
    root = data_dir()
    if not (root / "READY").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        build(root)
    others = [p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p and p != str(root)]
    os.environ["NLTK_DATA"] = os.pathsep.join([str(root), *others])  # for child processes too
    import nltk

    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    _guard_downloads(root)
    return root
