"""The docs hold together: every `hindsight ...` command in a fenced block of README.md,
CHANGELOG.md, docs/*.md and docs/results/*.md parses with the command line's own parser
(argparse only: no handler runs, no work is done), and every relative link and image in them
points at a file that exists (and, for a link into a Markdown page, at a heading that exists)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from support.paths import ROOT
from sweeps.cli import build_parser

PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md"),
                *(ROOT / "docs" / "results").glob("*.md")])
FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SUBSTITUTION = re.compile(r"\$\([^()]*\)")
SEPARATORS = {"&&", "||", ";", "|"}


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def fenced_commands(text: str) -> list[str]:
    """The ``hindsight`` command lines of ``text``'s fenced blocks: continuation lines joined,
    ``# comments`` dropped, each ``&&`` / ``;`` / ``|`` segment on its own, leading
    ``VAR=value`` assignments and a ``$`` prompt removed; a ``$(...)`` substitution is one word."""
    commands = []
    for block in FENCE.finditer(text):
        joined = re.sub(r"\\\n", " ", block.group(2))
        for line in joined.splitlines():
            try:
                words = shlex.split(SUBSTITUTION.sub("SUBSTITUTED", line), comments=True)
            except ValueError:  # not shell (an unbalanced quote in YAML or CSV)
                continue
            segment: list[str] = []
            for word in [*words, ";"]:
                if word not in SEPARATORS:
                    segment.append(word)
                    continue
                while segment and (segment[0] == "$" or ASSIGNMENT.match(segment[0])):
                    segment.pop(0)
                if segment and segment[0] == "hindsight":
                    commands.append(shlex.join(segment))
                segment = []
    return commands


def parse_error(command: str, capsys) -> str | None:
    """None when ``command`` parses with the ``hindsight`` parser, else argparse's message."""
    args = shlex.split(command)[1:]
    parser = build_parser(only=next((a for a in args if not a.startswith("-")), ""))
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        if exc.code:
            return capsys.readouterr().err.strip().splitlines()[-1]
    return None


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+[ \t]+(.+?)[ \t]*#*$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links and images of ``page`` (outside code) whose file, or whose heading in
    a Markdown target, does not exist."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.name})")
    return broken


COMMANDS = [(page, command) for page in PAGES for command in fenced_commands(page.read_text())]


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{_rel(p)}: {c[:60]}" for p, c in COMMANDS])
def test_every_documented_command_parses(page, command, capsys):
    assert parse_error(command, capsys) is None, f"{_rel(page)}: `{command}`"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_and_image_exists(page):
    assert broken_links(page) == []


def test_the_pages_hold_commands_and_the_readme_opens_with_demo_and_test():
    """The collection is not empty (a broken fence pattern would pass every test above), and
    the first fenced block of the README is the two commands a fresh machine runs."""
    assert len(COMMANDS) >= 30 and {_rel(p) for p, _ in COMMANDS} >= {"README.md", "docs/papers.md"}
    readme = (ROOT / "README.md").read_text()
    first = FENCE.search(readme).group(2)
    assert [line.split("#")[0].strip() for line in first.strip().splitlines()] == ["make demo", "make test"]
    assert len(readme.splitlines()) <= 200


def test_the_readme_limitations_are_at_most_eight_lines_each_linking_its_evidence():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Known limitations\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.strip().splitlines() if line.strip()]
    assert 1 <= len(lines) <= 8 and all(line.startswith("- ") for line in lines), lines
    assert all(LINK.search(line) for line in lines), [line for line in lines if not LINK.search(line)]


def test_the_checks_catch_a_bad_command_and_a_missing_file(tmp_path, capsys):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading: `here`\n")
    page.write_text(
        "Text [ok](there.md#a-heading-here), [gone](missing.md), ![img](img/none.png),\n"
        "[no anchor](there.md#elsewhere), `[in code](nowhere.md)`, [web](https://x.org/y).\n"
        "```bash\n"
        "HINDSIGHT_CACHE=$(mktemp -d) hindsight sweep a.yaml --dry-run && hindsight report a.yaml  # ok\n"
        "hindsight sweep a.yaml [--dry-run]\n"
        "hindsight train cfg.yaml \\\n  --set seed=1 --steps 3\n"
        "$ hindsight memory cfg.yaml --gpu-memory lots\n"
        "python -c 'hindsight is not this'\n"
        "```\n"
    )
    assert broken_links(page) == ["missing.md (no such file)", "img/none.png (no such file)",
                                  "there.md#elsewhere (no heading #elsewhere in there.md)"]
    commands = fenced_commands(page.read_text())
    assert commands == ["hindsight sweep a.yaml --dry-run", "hindsight report a.yaml",
                        "hindsight sweep a.yaml '[--dry-run]'",
                        "hindsight train cfg.yaml --set seed=1 --steps 3",
                        "hindsight memory cfg.yaml --gpu-memory lots"]
    errors = [parse_error(c, capsys) for c in commands]
    assert errors[:2] == [None, None]
    assert "unrecognized arguments: [--dry-run]" in errors[2]
    assert "unrecognized arguments: --steps 3" in errors[3]
    assert "invalid float value: 'lots'" in errors[4]
