"""English dates as the pages have always printed them: ISO 8601 order (2026-12-04 15:16), which a
lab reads without guessing day from month. Django's own English formats stay for everything else;
Simplified Chinese prints the same (zh_Hans/formats.py). Pages and PDFs print dates through
SHORT_DATE_FORMAT / SHORT_DATETIME_FORMAT, so one format serves every language."""

SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
