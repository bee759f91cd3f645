#!/usr/bin/env python3
"""Checks the citations in sluice's code and configuration: every Markdown
file a comment names (`docs/edge.md`, `BENCHMARKS.md`) exists, and every
section it cites by name (`docs/edge.md, "TLS and certificates"`, or
`docs/kubernetes.md, "What is in it" and "Autoscaling"`) is a heading of
that file or the bold name that opens one of its paragraphs or list items
(`**Compressed bodies.**`). A cited name matches one that starts with it
(after a date that opens it, `2026-11-25: `), ignoring case and
backticks, so a citation may shorten a long heading to its start.

Usage: scripts/check-citations.py [PATH ...] (default: src Cargo.toml
deploy config benches), from the repository's root. Prints each citation
that points nowhere and exits 1 if there is one.
"""

import re
import sys
from pathlib import Path

DEFAULT = ["src", "Cargo.toml", "deploy", "config", "benches"]
SUFFIXES = {".rs", ".toml", ".yaml", ".yml", ".sh", ".py"}

# A comment's text: what follows `//`, `///`, `//!` or `#` on a line.
COMMENT = re.compile(r"(?://[/!]?|#)\s?(.*)$")
# A Markdown file named in the text, then the sections cited after it:
# `, "A"`, ` ("A")`, `, "A" and "B"`, `, "A", "B"`.
CITATION = re.compile(
    r'((?:[\w.-]+/)*[\w.-]+\.md)'
    r'((?:\s*(?:,|\(|and|or)\s*"[^"]+")*)'
)
QUOTED = re.compile(r'"([^"]+)"')


def files(paths):
    for path in map(Path, paths):
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES)
        elif path.exists():
            yield path


def comments(path):
    """The file's comments, each run of comment lines joined into one
    text (a citation may wrap), with the line each run starts on."""
    run, start = [], 0
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        match = COMMENT.search(line)
        if match and not line.lstrip().startswith(("\"", "'")):
            if not run:
                start = number
            run.append(match.group(1).strip())
            continue
        if run:
            yield start, " ".join(run)
            run = []
    if run:
        yield start, " ".join(run)


def normal(text):
    return " ".join(text.replace("`", "").lower().split())


# The date that opens some headings of the benchmarks' history.
DATED = re.compile(r"^\d{4}-\d\d-\d\d: ")
# A paragraph or list item that opens with a bold name: `**Keys.** ...`.
LEAD = re.compile(r"^(?:[-*] +)?\*\*(.+?)\*\*")


def headings(path, cache={}):
    """The headings and bold paragraph names of a Markdown file, outside
    its fenced code blocks."""
    if path not in cache:
        names, fenced = [], False
        for line in path.read_text().splitlines():
            if line.startswith("```"):
                fenced = not fenced
            elif fenced:
                continue
            elif line.startswith("#"):
                names.append(DATED.sub("", normal(line.lstrip("#"))))
            elif match := LEAD.match(line):
                names.append(normal(match.group(1)))
        cache[path] = names
    return cache[path]


def main(argv):
    root = Path.cwd()
    problems = 0
    for path in files(argv or DEFAULT):
        for line, text in comments(path):
            for match in CITATION.finditer(text):
                cited = match.group(1)
                target = root / cited
                if not target.is_file():
                    # A file named relative to docs/ (`edge.md`) or not at all
                    # a path of this repository.
                    print(f"{path}:{line}: {cited}: no such file")
                    problems += 1
                    continue
                for section in QUOTED.findall(match.group(2)):
                    if not any(h.startswith(normal(section)) for h in headings(target)):
                        print(f'{path}:{line}: {cited}, "{section}": no such heading')
                        problems += 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
