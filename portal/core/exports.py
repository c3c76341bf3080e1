"""Text that users and agents typed, made safe for the files the portal writes.

ReportLab's `Paragraph` parses its text as markup (`<img src=…>` reads a file off the server,
an unbalanced `<` raises), so every paragraph the portal builds goes through `pdf_paragraph` or
`pdf_markup`, which escape the data; plain table cells are drawn as text and need nothing.
Spreadsheets run a CSV cell that starts with `= + - @`, a tab or a carriage return as a formula
(OWASP, "CSV Injection"), so every text cell goes through `csv_text`; numbers the portal writes
stay numbers.
"""

from __future__ import annotations

import functools
import re
from xml.sax.saxutils import escape

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.platypus import Paragraph

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


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
    """A paragraph of data: never markup."""
    return Paragraph(pdf_text(value), style)


def pdf_markup(template: str, style, **values) -> Paragraph:
    """A paragraph of the portal's own markup (`template`, str.format fields) with data filled in escaped."""
    return Paragraph(template.format(**{name: pdf_text(value) for name, value in values.items()}), style)


def csv_text(value: str) -> str:
    """A text cell a spreadsheet shows as text: a leading `'` where it would start a formula."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def csv_cell(value) -> str:
    """A CSV cell: null empty, numbers as numbers, text neutralised (`csv_text`)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(round(value, 6))
    if isinstance(value, int):
        return str(value)
    return csv_text(str(value))


def attachment(content, *, content_type: str, filename: str, inline: bool = False) -> HttpResponse:
    """A download whose file name (a GPU's serial, an uploaded photo's name) is quoted by Django's rules."""
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(not inline, filename)
    return response
