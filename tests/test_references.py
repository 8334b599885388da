"""Every reference in the docstrings, comments and docs resolves inside the repository.

- No citation of material a user does not have: no section signs, issue numbers, pitfall
  numbers or names of the specification's files in src/, docs/ or README.md, nor in the
  benchmarks, scripts, examples and tests (the CHANGELOG keeps its history).
- ``docs/PAGE.md`` named anywhere in src/, docs/ or README.md is a page of docs/; with
  ``#anchor`` the page has a heading of that anchor; with a quoted section (``docs/PAGE.md,
  "Heading"``) the page has a heading containing it.
- A relative Markdown link between the docs pages (``[text](page.md#anchor)``) points to a
  page and a heading that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# section signs, issue numbers, pitfall numbers (also bare: "(W36)", "W3/W71"), and the
# files of the specification the project was written against
CITATION = re.compile(r"§|[Ii]ssue [0-9]|pitfalls? W[0-9]|\(W[0-9]{1,2}[,)/ ]|W[0-9]{1,2}/W[0-9]"
                      r"|autodiff\.md|warp-pitfalls\.md|testing\.md|STYLE\.md")
REFERENCE = re.compile(r"docs/([A-Za-z0-9_/.-]+\.md)(#[A-Za-z0-9_-]+)?(?:, ['\"]([^'\"]+)['\"])?")
LINK = re.compile(r"\]\(([A-Za-z0-9_./-]+\.md)?(#[A-Za-z0-9_-]+)?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _sources():
    files = sorted((ROOT / "src").rglob("*.py")) + sorted(DOCS.rglob("*.md"))
    return files + [ROOT / "README.md"]


# the same for the rest of the code (a one-digit "(W2" there is the Wendland2 constant)
CODE_CITATION = re.compile(r"§|[Ii]ssue [0-9]|pitfalls? W[0-9]|\(W[0-9]{2}[,)/ ]"
                           r"|W[0-9]{1,2}/W[0-9]|autodiff\.md|warp-pitfalls\.md|testing\.md"
                           r"|STYLE\.md")


def _codeAndTests():
    """Benchmarks, scripts, examples and tests (this file, which spells the patterns out,
    aside)."""
    here = Path(__file__).resolve()
    files = [f for d in ("benchmarks", "scripts", "examples", "tests")
             for f in sorted((ROOT / d).rglob("*")) if f.suffix in (".py", ".sh", ".md")]
    return [f for f in files if f.resolve() != here]


def _headings(page: Path) -> list[str]:
    return HEADING.findall(FENCE.sub("", page.read_text()))


def _slug(text: str) -> str:
    """The anchor mkdocs' table of contents gives a heading (Python-Markdown's slugify)."""
    text = re.sub(r"`|\*\*|\*", "", text)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_citations_of_material_users_do_not_have():
    found = [f"{_rel(f)}:{n}: {line.strip()[:90]}" for f in _sources()
             for n, line in enumerate(f.read_text().splitlines(), 1) if CITATION.search(line)]
    found += [f"{_rel(f)}:{n}: {line.strip()[:90]}" for f in _codeAndTests()
              for n, line in enumerate(f.read_text().splitlines(), 1)
              if CODE_CITATION.search(line)]
    assert not found, "\n".join(found[:40]) + f"\n({len(found)} in all)"


def _references():
    out = []
    for f in _sources():
        text = f.read_text()
        for m in REFERENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{_rel(f)}:{line}", m.group(1), m.group(2), m.group(3)))
    return out


REFERENCES = _references()


def test_references_were_found():
    assert len(REFERENCES) > 100


@pytest.mark.parametrize("where, page, anchor, section", REFERENCES,
                         ids=[f"{r[0]}-{r[1]}" for r in REFERENCES])
def test_reference_resolves(where, page, anchor, section):
    target = DOCS / page
    assert target.is_file(), f"{where}: docs/{page} does not exist"
    headings = _headings(target)
    if anchor:
        assert anchor[1:] in {_slug(h) for h in headings}, \
            f"{where}: docs/{page} has no heading with the anchor {anchor}"
    if section:
        section = " ".join(section.replace("#", " ").split())  # wrapped over comment lines
        assert any(section.lower() in h.lower() for h in headings), \
            f"{where}: docs/{page} has no heading containing {section!r}"


def _links():
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        text = FENCE.sub("", page.read_text())
        for m in LINK.finditer(text):
            target, anchor = m.group(1), m.group(2)
            if target is None and anchor is None:
                continue
            out.append((_rel(page), target, anchor))
    return out


LINKS = _links()


@pytest.mark.parametrize("page, target, anchor", LINKS,
                         ids=[f"{p}-{t}{a or ''}" for p, t, a in LINKS])
def test_docs_link_resolves(page, target, anchor):
    source = ROOT / page
    path = source if target is None else (source.parent / target).resolve()
    assert path.is_file(), f"{page}: the link to {target} points to no page"
    if anchor:
        assert anchor[1:] in {_slug(h) for h in _headings(path)}, \
            f"{page}: {target or 'this page'} has no heading with the anchor {anchor}"
