"""Simplified Chinese dates in the portal's one format, ISO 8601 order (2026-12-04 15:16), as the
English pages print them and as the tables that name a format print them in every language: a
Chinese reader met "2026年12月4日" in one panel and "2026-12-04" in the next. Django's
zh_Hans formats stay for everything else."""

SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
