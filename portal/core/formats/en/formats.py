"""English dates as the pages have always printed them: ISO 8601 order (2026-12-04 15:16), which a
lab reads without guessing day from month. Django's own English formats stay for everything else;
Simplified Chinese takes Django's zh_Hans formats (2026年12月4日 15:16). Pages and PDFs print dates
through SHORT_DATE_FORMAT / SHORT_DATETIME_FORMAT, so each language gets its own."""

SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
