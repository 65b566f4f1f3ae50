"""``index.html``: the report as one self-contained page, beside ``index.md``.

MLflow's UI shows an HTML artifact inside a sandboxed iframe loaded from a ``blob:`` URL, so
relative links and image paths cannot resolve there.  This page therefore embeds everything
it shows: each table's Markdown rendered as an HTML table, each figure's PNG as a ``data:``
URI.  The other files (LaTeX, JSON, PDF) are named by their path in the artifact tree.  It
renders from the same inputs as ``index.md`` (:func:`reports.index.build_report` calls
:func:`write_html` right after writing it).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1, h2, h3 { line-height: 1.2; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.7em; }
th { border-bottom: 2px solid #888; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 0 0 2em; }
figure img { max-width: 100%; height: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
.files { color: #555; font-size: 0.9em; }
"""

_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*([^*]+)\*(?![\w*])"), r"<em>\1</em>"),
]


def inline(text: str) -> str:
    """Escape ``text`` and render the inline Markdown the report uses: code, bold, italic."""
    out = html.escape(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def markdown_table(lines: Sequence[str]) -> str:
    """A pipe table (header, ``---`` / ``---:`` rule, rows) as an HTML table."""
    head, rule, *rows = lines
    right = [c.endswith(":") and not c.startswith(":") for c in _cells(rule)]

    def row(cells: list[str], tag: str) -> str:
        parts = []
        for i, cell in enumerate(cells):
            cls = ' class="num"' if i < len(right) and right[i] else ""
            parts.append(f"<{tag}{cls}>{inline(cell.replace(chr(92) + '|', '|'))}</{tag}>")
        return "<tr>" + "".join(parts) + "</tr>"

    body = "\n".join(row(_cells(r), "td") for r in rows)
    return f"<table>\n<thead>{row(_cells(head), 'th')}</thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def markdown_block(text: str) -> str:
    """The Markdown of a table file: paragraphs and pipe tables."""
    blocks, para, table = [], [], []

    def flush() -> None:
        if para:
            blocks.append(f"<p>{inline(' '.join(para))}</p>")
            para.clear()
        if table:
            blocks.append(markdown_table(table))
            table.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            if para:
                flush()
            table.append(line)
        elif not line.strip():
            flush()
        else:
            if table:
                flush()
            para.append(line.strip())
    flush()
    return "\n".join(blocks)


def _figure(title: str, png: Path) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    alt = html.escape(title)
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption>{alt}</figcaption></figure>"
    )


def _files(paths: Sequence[Path], out: Path) -> str:
    names = ", ".join(
        f"<code>{html.escape(p.relative_to(out).as_posix())}</code>" for p in paths if p.exists()
    )
    return f'<p class="files">Files beside this page: {names}</p>' if names else ""


def _entry(title: str, paths: Sequence[Path], out: Path) -> str:
    parts = [f"<h3>{html.escape(title)}</h3>"]
    md = next((p for p in paths if p.suffix == ".md" and p.exists()), None)
    png = next((p for p in paths if p.suffix == ".png" and p.exists()), None)
    if md is not None:
        parts.append(markdown_block(md.read_text(encoding="utf-8")))
    if png is not None:
        parts.append(_figure(title, png))
    parts.append(_files(paths, out))
    return "\n".join(p for p in parts if p)


def render_html(
    title: str,
    summary: Sequence[str],
    written: Mapping[str, Sequence[Path]],
    skipped: Sequence[Any],
    command: str,
    out: Path,
) -> str:
    """The page: ``summary`` lines (Markdown bullets such as ``- runs: 9``), every written
    table and figure (embedded), what was skipped and why, and the command that rebuilds it.
    ``skipped`` items have ``diagnostic`` and ``reason`` (:class:`analysis.diagnostics.Skipped`)."""
    items = "\n".join(f"<li>{inline(line.removeprefix('- '))}</li>" for line in summary)
    entries = "\n".join(_entry(t, paths, out) for t, paths in written.items())
    skips = (
        "\n".join(
            f"<li><code>{html.escape(s.diagnostic)}</code>: {inline(s.reason)}</li>"
            for s in skipped
        )
        or "<li>nothing</li>"
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{STYLE}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<ul>
{items}
</ul>
<h2>Tables and figures</h2>
{entries or "<p>None: the runs support no table or figure yet.</p>"}
<h2>Skipped</h2>
<ul>
{skips}
</ul>
<h2>Regenerate</h2>
<pre><code>{html.escape(command)}</code></pre>
</body>
</html>
"""


def write_html(
    path: str | Path,
    title: str,
    summary: Sequence[str],
    written: Mapping[str, Sequence[Path]],
    skipped: Sequence[Any],
    command: str,
    out: str | Path,
) -> Path:
    """Write :func:`render_html` to ``path``; return it."""
    path = Path(path)
    path.write_text(
        render_html(title, summary, written, skipped, command, Path(out)), encoding="utf-8"
    )
    return path
