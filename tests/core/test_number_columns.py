"""Number columns (class "num", issue 48) are right-aligned with digits of one width, headers with
them; a table that marks its number cells marks the header above them too."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _rule(css: str, selector: str) -> str:
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        if selector in {s.strip() for s in selectors.split(",")}:
            return body
    return ""


def test_num_cells_and_their_headers_are_right_aligned_tabular():
    css = (REPO / "static/core/portal.css").read_text()
    for selector in ("td.num", "th.num"):
        body = _rule(css, selector)
        assert "text-align: right" in body and "tabular-nums" in body, selector


def test_a_table_with_num_cells_marks_their_headers():
    # Row by row: the i-th cell of a body row is "num" only where the i-th header is (templates whose
    # header and rows are plain <th>/<td> sequences; cells spanning columns are skipped).
    for path in [*REPO.glob("templates/**/*.html"), *REPO.glob("portal/*/templates/**/*.html")]:
        text = path.read_text()
        for head, body in re.findall(r"<thead>(.*?)</thead>\s*<tbody>(.*?)</tbody>", text, re.S):
            if "colspan" in head or "{% if" in head:
                continue
            headers = [("num" in attrs) for attrs in re.findall(r"<th([^>]*)>", head)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
                cells = [("num" in attrs) for attrs in re.findall(r"<td([^>]*)>", row)]
                if "colspan" in row or len(cells) != len(headers) or "{%" in "".join(re.findall(r"<td([^>]*)>", row)):
                    continue
                assert all(h or not c for h, c in zip(headers, cells, strict=True)), (path.name, headers, cells)
