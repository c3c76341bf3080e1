"""A bench-only app: with it installed last, the pipeline runs without its wear stage (bench/wear.py
compares ingest with the meters on and off)."""
