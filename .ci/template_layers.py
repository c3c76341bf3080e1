"""Fail when an app's template names a higher app: the one-way layers of pyproject.toml's
import-linter `layers` contract, applied to templates. Run by `make lint`;
`python .ci/template_layers.py [ROOT]` checks the project at ROOT (default: .) and prints each
offence as path:line: what.

Why a check of its own: import-linter sees Python imports, and a template reaches another app
through strings. A template under `templates/<app>/` belongs to that app; it may not

- `{% include %}` or `{% extends %}` a template under `templates/<higher app>/`,
- `{% url 'ns:…' %}` a URL of a higher app (the namespace is the `app_name` of the app's URL
  modules),
- `{% load lib %}` a tag library of a higher app (`portal/<app>/templatetags/<lib>.py`).

Apps of one layer may name each other's pages here (the guidance pages link the reliability
report); whether their Python may import each other stays import-linter's. What a higher app shows on a
lower app's page comes from the panel registry (portal/core/panels.py): the page includes a
variable, `{% include panel.template %}`, which names no app. Templates at the top of
`templates/` (base.html and the shared partials) and folders that are no portal app (Django's
`admin/`, `registration/`) are the project's and are not checked; they may be named by any app.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

TAG = re.compile(r"\{%-?\s*(include|extends|url|load)\s+(.*?)\s*-?%\}", re.S)
QUOTED = re.compile(r"""^(["'])(.*?)\1""")
APP_NAME = re.compile(r"""^app_name\s*=\s*["']([\w-]+)["']""", re.M)


def layers(root: Path) -> dict[str, int]:
    """App label → its layer: higher layers have higher numbers."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c["type"] == "layers")
    package = config["tool"]["importlinter"]["root_package"]
    found: dict[str, int] = {}
    for height, layer in enumerate(reversed(contract["layers"])):
        for module in re.split(r"[|:]", layer):
            parts = module.strip().strip("()").strip().split(".")
            if len(parts) == 2 and parts[0] == package:
                found[parts[1]] = height
    return found


def namespaces(root: Path) -> dict[str, str]:
    """URL namespace → the app whose URL module declares it."""
    found = {}
    for path in sorted((root / "portal").glob("*/*urls.py")):
        match = APP_NAME.search(path.read_text(encoding="utf-8"))
        if match:
            found[match.group(1)] = path.parent.name
    return found


def libraries(root: Path) -> dict[str, str]:
    """Template tag library → the app that has it."""
    return {
        path.stem: path.parent.parent.name
        for path in sorted((root / "portal").glob("*/templatetags/*.py"))
        if path.stem != "__init__"
    }


def _names(tag: str, argument: str, urls: dict[str, str], libs: dict[str, str], apps) -> list[tuple[str, str]]:
    """(app, what) for each app the tag names; nothing for a variable or a project template."""
    if tag == "load":
        words = argument.split()
        if "from" in words:
            words = words[words.index("from") + 1 :]
        return [(libs[word], f"loads {word}") for word in words if word in libs]
    quoted = QUOTED.match(argument)
    if not quoted:
        return []  # a variable: {% include panel.template %}, {% url view_name %}
    value = quoted.group(2)
    if tag == "url":
        namespace = value.partition(":")[0] if ":" in value else ""
        return [(urls[namespace], f"reverses {value}")] if namespace in urls else []
    folder = value.partition("/")[0] if "/" in value else ""
    verb = {"include": "includes", "extends": "extends"}[tag]
    return [(folder, f"{verb} {value}")] if folder in apps else []


def offences(path: Path, owner: str, table, urls, libs) -> list[str]:
    found = []
    text = path.read_text(encoding="utf-8")
    own_height = table[owner]
    for match in TAG.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for app, what in _names(match.group(1), match.group(2), urls, libs, table):
            if app == owner:
                continue
            if table[app] > own_height:
                found.append(f"{path}:{line}: {owner} {what}, of {app}, a higher layer")
    return found


def check(root: Path) -> list[str]:
    table, urls, libs = layers(root), namespaces(root), libraries(root)
    out = []
    templates = root / "templates"
    for path in sorted(templates.rglob("*.html")) + sorted(templates.rglob("*.txt")):
        parts = path.relative_to(templates).parts
        if len(parts) > 1 and parts[0] in table:
            out += offences(path, parts[0], table, urls, libs)
    for path in sorted((root / "portal").glob("*/templates/**/*.html")):
        owner = path.relative_to(root / "portal").parts[0]
        if owner in table:
            out += offences(path, owner, table, urls, libs)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".").resolve()
    found = check(root)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} template(s) naming a higher app: register a panel in that app's panels.py "
            "(portal/core/panels.py) and include it from the page's slot"
        )
        return 1
    print("Templates name no higher app (layers of pyproject.toml's import-linter contract).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
