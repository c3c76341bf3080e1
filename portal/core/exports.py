"""Text that users and agents typed, made safe for the files the portal writes.

PDF (ReportLab). A `Paragraph` parses its text as markup (`<img src=…>` reads a file off the
server, an unbalanced `<` raises), so every paragraph goes through `pdf_paragraph` or `pdf_markup`,
which escape the data. A plain table cell is drawn as text, never parsed, but each line break in it
adds a line to its row, and a row taller than a page cannot be laid out (a serial of 64 newlines
failed the whole report): `pdf_cell` makes any value one line. Tables that hold paragraphs get
fixed column widths (an auto-sized column holding a long plain cell leaves a paragraph beside it
a negative width) and split a tall row across pages. Helvetica has no Chinese glyphs: `pdf_text`
sets runs of CJK characters in ReportLab's built-in CID font, and a plain cell holding any becomes
a paragraph.

CSV. A spreadsheet runs a cell starting with `= + - @`, a tab or a carriage return as a formula
(OWASP, "CSV Injection"); `csv_cell` decides by the value's type, never by its look: text is
always neutralised with a leading `'` (a serial "-1+2" or "=1" is text, and stays text), numbers
the portal computes (`int`, `float`, `Decimal`; -3.5 is a number) are written as numbers.

Downloads. `attachment` names the file through Django's `content_disposition_header` (quotes,
semicolons, line breaks and non-ASCII in a serial become RFC 6266 quoting, never header syntax).
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from xml.sax.saxutils import escape

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.platypus import Paragraph

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# C0 and C1 controls (line breaks and tabs among them), DEL, and Unicode's line and paragraph separators.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

# ReportLab's built-in CID font for Simplified Chinese: no font file to ship; PDF readers supply it.
CJK_FONT = "STSong-Light"
_CJK_RUN = re.compile(
    r"[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]+"
)


@functools.cache
def _cjk_font_registered() -> str:
    pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))
    return CJK_FONT


def pdf_text(value) -> str:
    """Any value as ReportLab paragraph text that reads exactly as written: escaped, and runs of
    Chinese (CJK) characters set in the CID font, which Helvetica cannot draw."""
    escaped = escape("" if value is None else str(value))
    if not _CJK_RUN.search(escaped):
        return escaped
    font = _cjk_font_registered()
    return _CJK_RUN.sub(lambda run: f'<font name="{font}">{run.group(0)}</font>', escaped)


def needs_cjk_font(value) -> bool:
    return isinstance(value, str) and _CJK_RUN.search(value) is not None


def pdf_paragraph(value, style) -> Paragraph:
    """A paragraph of data (it wraps inside its table column): never markup."""
    return Paragraph(pdf_text(value), style)


def pdf_markup(template: str, style, **values) -> Paragraph:
    """A paragraph of the portal's own markup (`template`, str.format fields) with data filled in escaped.
    The template may be a translation: its own Chinese runs are set in the CJK font too."""
    if _CJK_RUN.search(template):
        font = _cjk_font_registered()
        template = _CJK_RUN.sub(lambda run: f'<font name="{font}">{run.group(0)}</font>', template)
    return Paragraph(template.format(**{name: pdf_text(value) for name, value in values.items()}), style)


def pdf_cell(value) -> str:
    """Any value as a plain table cell: one line (control characters read as spaces); null is empty."""
    return "" if value is None else _CONTROLS.sub(" ", str(value))


def csv_text(value: str) -> str:
    """A text cell a spreadsheet shows as text: a leading `'` where it would start a formula."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def csv_cell(value) -> str:
    """A CSV cell: null empty, numbers as numbers, anything else text, neutralised (`csv_text`)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(round(value, 6))
    if isinstance(value, int | Decimal):
        return str(value)
    return csv_text(str(value))


def attachment(content, *, content_type: str, filename: str, inline: bool = False) -> HttpResponse:
    """A download whose file name (a GPU's serial, an uploaded photo's name) is quoted by Django's rules."""
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(not inline, filename)
    return response
