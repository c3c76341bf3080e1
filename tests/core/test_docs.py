"""The README and the pages under docs/ point at things that exist: every `make` target they name
is a target of the Makefile, and every relative link (a file, and the heading after its `#`)
leads somewhere."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCED = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# `make` then its words, up to the end of the span or line, a comment or a shell operator.
MAKE = re.compile(r"(?:^|[\s;&|(])make((?:[ \t]+[^\s;&|)#]+)*)")
# make's options that take the next word as their argument.
OPTION_WITH_ARGUMENT = {"-C", "-f", "-o", "-W", "-I", "-j", "-l"}


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]


def makefile_targets(text: str) -> set[str]:
    """The explicit targets of a Makefile's rules (`a b: prerequisites`), variables aside."""
    targets = set()
    for line in text.splitlines():
        rule = re.match(r"^([^\s:=#$][^:=#]*?)\s*::?(?!=)", line)
        if rule:
            targets.update(rule.group(1).split())
    return targets


def code_of(text: str) -> list[str]:
    """What a page shows as code: fenced blocks' lines, indented commands, inline code spans."""
    code = [line for block in FENCED.findall(text) for line in block.splitlines()[1:-1]]
    prose = FENCED.sub("", text)
    code += [line for line in prose.splitlines() if re.match(r"^ {4,}make\s", line)]
    code += CODE_SPAN.findall(prose)
    return code


def make_targets_named(text: str) -> set[str]:
    """Every target a page tells someone to make, and every benchmark it names by its target."""
    named = set()
    for code in code_of(text):
        code = re.sub(r"(?:^|\s)#.*", "", code)  # a shell comment
        for match in MAKE.finditer(code):
            words = iter(match.group(1).split())
            for word in words:
                if word in OPTION_WITH_ARGUMENT:
                    next(words, None)
                elif not word.startswith("-") and "=" not in word:
                    named.add(word)
        if re.fullmatch(r"bench-[a-z-]+", code):
            named.add(code)
    return named


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found, seen = set(), {}
    for line in FENCED.sub("", text).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, text: str) -> list[str]:
    broken = []
    for target in LINK.findall(CODE_SPAN.sub("", FENCED.sub("", text))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve()
        if path and not linked.exists():
            broken.append(f"{target}: no such file")
        elif (
            anchor
            and (not path or linked.suffix == ".md")
            and anchor not in anchors(linked.read_text() if path else text)
        ):
            broken.append(f"{target}: no such heading")
    return broken


def test_the_readers_find_targets_links_and_headings():
    makefile = (
        "X := 1\nY ?= 2\n$(STAMP): a\n.PHONY: demo\ndemo: $(STAMP) messages\n\tcmd: no rule\nbench-a bench-b: x\n"
    )
    assert makefile_targets(makefile) == {".PHONY", "demo", "bench-a", "bench-b"}
    page = (
        "Run `make demo ARGS=--ldap` or `make -o .venv/.installed lint`, then\n\n"
        "    make messages          # or: make gettext\n\n"
        "```sh\nsudo make test-deps && make test TEST_WORKERS=0\n# make sure\n```\n"
        "`manage.py makemessages`, `bench-wear`, `bench/wear.py`; make sure of it.\n"
    )
    assert make_targets_named(page) == {"demo", "lint", "messages", "test-deps", "test", "bench-wear"}
    assert slug("Soak: the whole cluster under faults (`make soak`)") == "soak-the-whole-cluster-under-faults-make-soak"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## Web nodes, behind nginx\n") == {
        "a", "a-1", "web-nodes-behind-nginx",
    }  # fmt: skip


def test_a_broken_link_or_heading_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Its part\n")
    page = tmp_path / "page.md"
    text = (
        "[ok](other.md) [ok](other.md#its-part) [ok](#here) ![ok](other.md) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad](other.md#no-such-part) `[code](not-a-link.md)`\n\n## Here\n"
    )
    assert broken_links(page, text) == ["missing.md: no such file", "other.md#no-such-part: no such heading"]


def test_every_make_target_the_docs_name_is_in_the_makefile():
    targets = makefile_targets((REPO / "Makefile").read_text())
    assert {"demo", "test", "lint", "bench"} <= targets
    missing = {
        str(page.relative_to(REPO)): sorted(named - targets)
        for page in pages()
        if (named := make_targets_named(page.read_text())) - targets
    }
    assert missing == {}, "named in the docs but not a target of the Makefile"


def test_every_relative_link_of_the_docs_leads_somewhere():
    broken = {str(page.relative_to(REPO)): found for page in pages() if (found := broken_links(page, page.read_text()))}
    assert broken == {}
