"""One HTML page for a demo run: per notebook its wall time, key numbers, before/after table and plots.

    build_report([(name, executed_notebook, seconds, error_or_None), ...], profile="cpu")  # -> runs/demo/report.html

The page stands alone (plots embedded as base64) and links each executed notebook rendered to HTML by nbconvert,
written beside it. The numbers come from runs/<notebook>/metrics.json, the same file the tests assert on.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import logging
import os
import platform
import re
from pathlib import Path

from helpers.runs import runs_dir

EVAL_ROWS = [("format", "Format compliance (a valid tool call)"), ("accuracy", "Accuracy (environment score)"),
             ("exact", "Exactly right")]


def _pct(value) -> str:
    return "–" if value is None else f"{value:.0%}"


def _with_ci(metrics: dict, key: str, when: str) -> str:
    value, ci = metrics.get(f"{key}_{when}"), metrics.get(f"{key}_ci_{when}")
    return _pct(value) + (f" <small>[{_pct(ci[0])}, {_pct(ci[1])}]</small>" if ci else "")


def key_facts(m: dict) -> list[tuple[str, str]]:
    """The few numbers a learner looks for first, when the notebook recorded them."""
    facts = [("model", m.get("model")), ("started from", m.get("start_checkpoint")), ("precision", m.get("precision"))]
    if m.get("steps_planned"):
        facts.append(("training steps", f"{m.get('steps_run')} of {m['steps_planned']}"
                      + (f", {m['seconds_per_step']} s a step" if m.get("seconds_per_step") else "")))
    if m.get("episodes_requested"):
        facts.append(("teacher episodes kept", f"{m.get('episodes_kept')} of {m['episodes_requested']}"))
    if m.get("stopped_too_few_steps"):
        facts.append(("training stopped", m["stopped_too_few_steps"]))
    if m.get("reward_initial") is not None and m.get("reward_final") is not None:
        facts.append(("training reward", f"{m['reward_initial']:.2f} → {m['reward_final']:.2f}"
                      + (f" ({m['diagnosis']})" if m.get("diagnosis") else "")))
    return [(label, str(value)) for label, value in facts if value is not None]


def eval_table(m: dict) -> str:
    """Before/after held-out numbers with 95 % intervals, and the paired change; "" if none were recorded. A run
    that stopped before it trained (too few steps in its budget) was not evaluated after: no change is shown."""
    if "accuracy_before" not in m:
        return ""
    stopped = bool(m.get("stopped_too_few_steps"))
    after = (lambda key: "not evaluated") if stopped else (lambda key: _with_ci(m, key, "after"))
    rows = "".join(f"<tr><td>{label}</td><td>{_with_ci(m, key, 'before')}</td><td>{after(key)}</td></tr>"
                   for key, label in EVAL_ROWS if f"{key}_before" in m)
    out = (f"<table class='eval'><tr><th>held-out, {m.get('eval_n', '?')} questions</th><th>before</th>"
           f"<th>after</th></tr>{rows}</table>")
    if "accuracy_change" in m and not stopped:
        low, high = m.get("accuracy_change_ci") or (None, None)
        verdict = ("an improvement" if low is not None and low > 0 else "a loss" if high is not None and high < 0
                   else "within noise (the interval contains 0)")
        interval = f" [{low * 100:+.1f}, {high * 100:+.1f}]" if low is not None else ""
        out += (f"<p class='change'>Paired change in accuracy on the same questions: "
                f"<b>{m['accuracy_change'] * 100:+.1f} points</b>{interval}, {m.get('questions_gained', 0)} gained, "
                f"{m.get('questions_lost', 0)} lost: {verdict}.</p>")
    return out


_LOCAL_IFRAME = re.compile(r"<iframe[^>]+src=[\"']https?://(127\.0\.0\.1|localhost)[:/]", re.IGNORECASE)


def without_live_outputs(nb, *, drop_all_widgets: bool = False):
    """`nb` without what only works while its kernel runs: a page served by the kernel on 127.0.0.1 (trackio's
    dashboard) becomes a line saying so; a progress-bar widget (every widget with `drop_all_widgets`) is left out."""
    import nbformat

    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if _LOCAL_IFRAME.search("".join(data.get("text/html", ""))):
                out = nbformat.v4.new_output("stream", name="stdout", text="[a live dashboard served by the kernel "
                                             "while it ran; `trackio show` opens the logged metrics]\n")
            elif "application/vnd.jupyter.widget-view+json" in data and (
                    drop_all_widgets or "%|" in "".join(data.get("text/plain", ""))):
                continue
            kept.append(out)
        cell.outputs = kept
    return nb


def render_notebook(executed: Path, html_path: Path) -> Path:
    """The executed notebook as a standalone HTML page (nbconvert's lab template), code and outputs.

    Two kinds of output only work while the kernel runs, and read badly in a static page: a page served by
    the kernel on 127.0.0.1 (trackio's dashboard: a 1000-pixel blank frame whose URL carries the server's
    token) becomes a line saying so; a progress-bar widget (tqdm), which shows its first state, "0%", is left out.
    """
    import nbformat
    from nbconvert import HTMLExporter

    nb = without_live_outputs(nbformat.read(str(executed), as_version=4))
    quiet = logging.getLogger("tools.report.nbconvert")  # nbconvert warns that plots have no alt text
    quiet.setLevel(logging.ERROR)
    body, _ = HTMLExporter(template_name="lab", log=quiet).from_notebook_node(nb)
    html_path.write_text(body, encoding="utf-8")
    return html_path


def _title(executed: Path, name: str) -> str:
    try:
        cells = json.loads(executed.read_text())["cells"]
    except (OSError, ValueError):
        return name
    for cell in cells:
        for line in "".join(cell.get("source", "")).splitlines():
            if cell["cell_type"] == "markdown" and re.match(r"# ", line):
                return line[2:].strip()
    return name


def _section(name: str, executed: Path, seconds: float, error: str | None, out_dir: Path, runs: Path) -> str:
    m_path = runs / name / "metrics.json"
    m = json.loads(m_path.read_text()) if m_path.exists() else {}
    parts = [f"<section><h2>{html.escape(_title(executed, name))}</h2>",
             f"<p class='meta'>{html.escape(name)} · ran in {seconds / 60:.1f} min"]
    if executed.exists():
        page = render_notebook(executed, out_dir / f"{name}.html")
        parts.append(f" · <a href='{page.name}'>the executed notebook, every cell and output</a>")
    parts.append("</p>")
    if error:
        parts.append(f"<p class='error'>Failed: {html.escape(error[:500])}</p>")
    facts = key_facts(m)
    if facts:
        parts.append("<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in facts)
                     + "</dl>")
    parts.append(eval_table(m))
    for png in sorted((runs / name).glob("*.png")):
        raw = png.read_bytes()
        wide = int.from_bytes(raw[16:20], "big") > 1100  # PNG header: a row of panels gets the window's width
        parts.append(f"<figure{' class=wide' if wide else ''}><img alt='{png.stem}' "
                     f"src='data:image/png;base64,{base64.b64encode(raw).decode()}'>"
                     f"<figcaption>{html.escape(png.name)}</figcaption></figure>")
    if not m:
        parts.append(f"<p>No metrics: {html.escape(str(m_path))} was not written.</p>")
    return "".join(parts) + "</section>"


STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
.meta{color:#555}.note{background:#fff8e1;padding:.6rem .9rem;border-radius:4px}.error{color:#b00020}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem}dt{color:#555}dd{margin:0}
table.eval{border-collapse:collapse;margin:1rem 0}table.eval td,table.eval th{border:1px solid #ccc;padding:.3rem .7rem;text-align:left}
small{color:#666}figure{margin:1.2rem 0}
figure.wide{width:min(96vw,1600px);position:relative;left:50%;transform:translateX(-50%)}figure.wide img{width:100%}img{max-width:100%;border:1px solid #eee}figcaption{color:#777;font-size:.85rem}"""


def build_report(runs: list[tuple[str, Path, float, str | None]], *, profile: str, out_dir: Path | None = None) -> Path:
    """Write report.html (and one rendered page per executed notebook) into out_dir (default runs/demo)."""
    out_dir = Path(out_dir or runs_dir() / "demo")
    out_dir.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    total = sum(seconds for _, _, seconds, _ in runs)
    note = ("<p class='note'>PROFILE=tiny runs tiny random models: these numbers show that every step works, "
            "not that anything was learned. Run <code>make demo</code> (PROFILE=cpu) for a real model.</p>"
            if profile == "tiny" else "")
    sections = "".join(_section(name, Path(executed), seconds, error, out_dir, runs_dir())
                       for name, executed, seconds, error in runs)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Agent RL demo ({profile})</title>"
            f"<style>{STYLE}</style></head><body><h1>Agent RL notebooks: demo report</h1>"
            f"<p class='meta'>PROFILE={html.escape(profile)} · {when} · {os.cpu_count()} CPU cores, "
            f"{html.escape(platform.machine())} · {total / 60:.1f} min in all</p>{note}{sections}</body></html>")
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
