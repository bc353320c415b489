"""Importing helpers first skips jsonschema's IRI grammar parser (unused here, 1.3-3.6 s per process that imports
openenv: docs/measurements.md, "Start-up imports"), and leaves it alone when jsonschema's format checks came first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_helpers_first_skips_the_iri_parser_and_the_other_format_checks_still_work():
    out = _run("import sys, helpers, jsonschema\n"
               "checker = jsonschema.FormatChecker()\n"
               "print(sys.modules.get('rfc3987_syntax'), 'iri' in checker.checkers,\n"
               "      checker.conforms('2026-11-29', 'date'), checker.conforms('2026-13-01', 'date'))")
    assert out.split() == ["None", "False", "True", "False"]


def test_format_checks_loaded_before_helpers_keep_their_iri_parser():
    out = _run("import sys, jsonschema, helpers\n"
               "from helpers.startup import skip_unused_iri_parser\n"
               "print(type(sys.modules.get('rfc3987_syntax')).__name__, skip_unused_iri_parser(),\n"
               "      'iri' in jsonschema.FormatChecker().checkers)")
    assert out.split() == ["module", "False", "True"]
