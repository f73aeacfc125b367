"""The documents people read stay navigable (issue 45 item 6): BENCHMARKS.md is a page of current
figures of at most 200 lines, and every relative link or image in BENCHMARKS.md, README.md and
docs/**/*.md resolves — the file exists, and a ``#anchor`` into a Markdown file is one of its
headings' anchors as GitHub makes them.

The Markdown is parsed by markdown-it-py (CommonMark plus tables), so code blocks and code spans
are not read as links. GitHub's anchors follow github-slugger, which reproduces them: the
heading's text in lower case, every character dropped that is not a letter, a mark, a decimal or
letter number, ``_``, a space or ``-`` (so ``—``, ``·``, ``½`` and ``⁵`` go), each space turned
into ``-``; a repeated anchor gets ``-1``, ``-2``, ... in document order."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "BENCHMARKS.md", ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
MAX_BENCHMARKS_LINES = 200
PARSER = MarkdownIt("commonmark").enable("table")


def slug(text: str) -> str:
    """github-slugger's slug of a heading's text (without the de-duplicating suffix)."""
    kept = (ch for ch in text.lower()
            if ch in " -" or unicodedata.category(ch)[0] in "LM"
            or unicodedata.category(ch) in ("Nd", "Nl", "Pc"))
    return "".join(kept).replace(" ", "-")


def inline_text(token: Token) -> str:
    """What a heading renders as text: its text and code spans, images by their alt text."""
    return "".join(child.content for child in token.children or ()
                   if child.type in ("text", "code_inline", "image"))


@cache
def tokens(path: Path) -> list[Token]:
    return PARSER.parse(path.read_text("utf-8"))


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors GitHub gives a Markdown file's headings, in document order with suffixes."""
    seen: dict[str, int] = {}
    out = []
    toks = tokens(path)
    for opening, inline in zip(toks, toks[1:], strict=False):
        if opening.type != "heading_open":
            continue
        base = slug(inline_text(inline))
        name, n = base, seen.get(base, 0)
        while name in seen:
            n += 1
            name = f"{base}-{n}"
        seen[base] = n
        seen[name] = 0
        out.append(name)
    return frozenset(out)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image in the document, as written (percent-decoded)."""
    out = []
    for block in tokens(path):
        for child in block.children or ():
            target = child.attrs.get("href") or child.attrs.get("src")
            if child.type in ("link_open", "image") and isinstance(target, str):
                line = (block.map[0] + 1) if block.map else 0
                out.append((line, unquote(target)))
    return out


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """Why each relative link of the document does not resolve (each named by the first line of
    its paragraph or table, relative to ``root``)."""
    out = []
    for line, target in links(path):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto: ...: not ours
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{line}: {target}"
        if not dest.exists():
            out.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: no heading with this anchor in {dest.relative_to(root)}")
    return out


def test_benchmarks_is_a_short_page_of_current_figures() -> None:
    lines = (ROOT / "BENCHMARKS.md").read_text("utf-8").splitlines()
    assert len(lines) <= MAX_BENCHMARKS_LINES, (
        f"BENCHMARKS.md has {len(lines)} lines: move the history into docs/benchmarks/")


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    bad = broken(path)
    assert not bad, "\n".join(bad)


def test_the_slugs_are_githubs() -> None:
    """Examples whose anchors GitHub's renderer gave (github-slugger's fixtures and this
    repository's headings): punctuation, dashes, other numbers and duplicates."""
    assert slug("Issue 22 — learning at the privacy frontier") == (
        "issue-22--learning-at-the-privacy-frontier")
    assert slug("sblb / sblb-fixed at the privacy frontier") == (
        "sblb--sblb-fixed-at-the-privacy-frontier")
    assert slug("AdaR-UCB against UCB at (α, ε) = (2, 1)") == "adar-ucb-against-ucb-at-α-ε--2-1"
    assert slug("T = 2·10⁵ and (r − ½) x") == "t--210-and-r---x"
    assert slug("Service ingest (spec §7)") == "service-ingest-spec-7"
    assert slug("snake_case Größe") == "snake_case-größe"


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    """The check can fail: a missing file and a missing anchor are both reported, a repeated
    heading's second anchor resolves and a link inside a code span is not a link."""
    doc = tmp_path / "a.md"
    doc.write_text("# Title\n\n## Part\n\n## Part\n\n[ok](#part-1) [gone](b.md) [bad](#part-2) "
                   "`[code](nowhere.md)`\n", "utf-8")
    assert broken(doc, tmp_path) == ["a.md:7: b.md: no such file",
                     "a.md:7: #part-2: no heading with this anchor in a.md"]
