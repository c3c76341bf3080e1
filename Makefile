# The two commands: `make demo` and `make test`. Everything else is for developers.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

LDAP_PACKAGES := slapd ldap-utils libldap2-dev libsasl2-dev

# Every Python the commands below start (the suite's workers, the portals, agents and servers its
# tests start, the demo's processes) keeps the project's compiled modules, as it would without
# this variable: set (some containers set it), each of them compiled every module it imports
# again, and pytest rewrote every test module's asserts again in each worker.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo demo-ldap ldap-deps test-deps test test-postgres test-fast test-agent agent-dist lint serve serve-small worker beat bench bench-agent bench-agent-portal bench-agent-diagnose bench-ingest bench-ingest-cpu bench-ingest-commands bench-anomaly bench-live bench-pipeline bench-pipeline-jobs bench-pipeline-against bench-remote-write bench-remote-write-cpu bench-pages bench-reports bench-usage bench-wear bench-checklists bench-storage bench-storage-db bench-retention soak install messages gettext browser promtool axe strace clean

$(STAMP): requirements.txt requirements-ldap.txt requirements-dev.txt agents/requirements.txt | ldap-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

# python-ldap (LDAP sign-in; requirements-ldap.txt, an optional extra that requirements-dev.txt
# includes) builds against OpenLDAP's and Cyrus SASL's headers; the LDAP tests and
# `make demo-ldap` run Debian's slapd with ldap-utils. Installed as root, like Chromium below.
ldap-deps:
	@dpkg -s $(LDAP_PACKAGES) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(LDAP_PACKAGES) >/dev/null; \
	  else echo "missing: 'sudo apt-get install $(LDAP_PACKAGES)' (python-ldap will not build; LDAP tests skip)"; fi; }

# Debian's packages the whole suite drives for real, installed as root in ONE apt-get run (none
# when all are there; elsewhere the tests needing a missing one skip with a message, in CI they
# fail): Chromium with Liberation fonts (a recommendation of Chromium's, which
# --no-install-recommends would leave out) and a Chinese font (the Chinese screenshots show boxes
# without one), promtool (the /metrics check), strace (the agent installer's test records every
# child's argv), gettext (msgfmt), the LDAP packages above, Slurm for tests/scheduler (each run
# starts its own single-node cluster), nginx, openssl and systemd-analyze for deploy/'s site and
# units, curl for the agent installer; and npm (axe-core, oidc-provider) when no npm is on PATH
# (NodeSource's nodejs brings its own and conflicts with Debian's).
TEST_PACKAGES := chromium fonts-liberation fonts-wqy-microhei prometheus strace gettext $(LDAP_PACKAGES) \
	slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge nginx openssl systemd curl

test-deps:
	@missing="$$(for p in $(TEST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done; \
	  command -v npm >/dev/null 2>&1 || echo npm)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing" $$missing; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing:" $$missing "('sudo make test-deps'; the tests that need them skip)"; fi; fi

# The translations: locale/<lang>/LC_MESSAGES/*.po compiled to the .mo files Django reads (the .mo
# are built, never committed). Needs GNU gettext's msgfmt (Debian's gettext, installed as root).
gettext:
	@command -v msgfmt >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gettext >/dev/null; \
	  else echo "msgfmt missing: 'sudo apt-get install gettext' (the pages stay in English without it)"; fi; }

messages: $(STAMP) gettext
	@if command -v msgfmt >/dev/null 2>&1 && ls locale/*/LC_MESSAGES/*.po >/dev/null 2>&1; then \
	  DEBUG=true $(PY) manage.py compilemessages -l zh_Hans -i .venv -i node_modules -v 0; fi

# Debian's Chromium for the browser tests (never a downloaded browser build), and a Chinese font
# for the pages in Chinese (their screenshots show boxes without one).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: 'sudo apt-get install chromium' (browser tests skip without it)"; fi; }
	@fc-list :lang=zh 2>/dev/null | grep -q . || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fonts-wqy-microhei >/dev/null; \
	  else echo "no Chinese font: 'sudo apt-get install fonts-wqy-microhei' (Chinese screenshots show boxes)"; fi; }

# axe-core for the accessibility browser test and oidc-provider for the OIDC sign-in tests, pinned
# in package.json / package-lock.json (in CI those tests fail without them).
axe:
	@{ test -f node_modules/axe-core/axe.min.js && test -f node_modules/oidc-provider/package.json; } || { \
	  command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null; } ; \
	  npm ci --no-audit --no-fund; }

# Debian's prometheus package for promtool (the /metrics test checks the output with it; in CI
# that test fails without it).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "promtool missing: 'sudo apt-get install prometheus' (the /metrics promtool test skips without it)"; fi; }

# Debian's strace for the agent installer's test (it records every child's argv: the enrolment
# code must be in none; in CI that test fails without it).
strace:
	@command -v strace >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends strace >/dev/null; \
	  else echo "strace missing: 'sudo apt-get install strace' (the agent installer's test skips without it)"; fi; }

# The agent's wheel (built from agents/) and nvidia-ml-py's, served at /agent/ so GPU hosts
# install from the portal alone. Each start of manage.py serve/run/demo prepares them itself;
# this prepares them without starting. Fetching needs PyPI or pip's cache once.
agent-dist: $(STAMP)
	-DEBUG=true $(PY) manage.py agent_dist

demo: $(STAMP) messages
	$(PY) manage.py demo $(ARGS)

# The demo with a throwaway LDAP directory (slapd): its people sign in with their directory passwords.
demo-ldap: $(STAMP) messages
	$(PY) manage.py demo --ldap $(ARGS)

# pytest-xdist: TEST_WORKERS processes (two per core, at most 4: the tests spend a third of their
# time waiting on the servers and programs they start) share the tests; the tests that share one
# costly fixture (the Slurm cluster, the browser and its portals, a module's) stay on one worker,
# in an order that keeps pytest-django's (tests/conftest.py, and its scheduler tests/xdist_units.py).
# The tests marked serial (their assertions bound wall-clock time, or they load the whole
# machine) run afterwards, alone, from the files that name the marker only (--serial-files-only).
# TEST_WORKERS=0: one process for everything, as pytest alone.
TEST_WORKERS ?= $(shell n=$$(( 2 * $$(nproc 2>/dev/null || echo 1) )); [ $$n -gt 4 ] && n=4; echo $$n)

# $(call pytest_passes,ARGUMENTS,MARK EXPRESSION): the two passes both run whatever the first
# gave, so one run shows every failure; a serial pass that selects nothing (exit 5) is no failure.
marked = -m "$(if $(2),($(2)) and )$(1)"
pytest_passes = $(if $(filter 0,$(TEST_WORKERS)),$(PY) -m pytest $(1) $(if $(2),-m "$(2)"),\
	status=0; $(PY) -m pytest $(1) -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(call marked,not serial,$(2)) || status=$$?; \
	$(PY) -m pytest $(1) --serial-files-only $(call marked,serial,$(2)) || [ $$? = 5 ] || status=1; exit $$status)

test: test-deps $(STAMP) browser promtool axe strace messages
	$(call pytest_passes,,)

# The second pass of .ci/run, on the PostgreSQL in DATABASE_URL: only the tests that reach the
# database (--database-tests-only, tests/conftest.py); the others, and the browser tests (their
# portal runs on SQLite whatever DATABASE_URL says), ran in `make test` and would only repeat
# themselves. Each xdist worker has a test database of its own (pytest-django's _gwN suffix).
test-postgres: $(STAMP) messages
	@case "$$DATABASE_URL" in postgres*) ;; *) echo "DATABASE_URL=postgres://... is needed"; exit 2;; esac
	$(call pytest_passes,-q -p no:cacheprovider --database-tests-only,not browser)

test-fast: $(STAMP) messages
	$(PY) -m pytest -m "not browser" -x -q

# The agent's own tests, without Django (as on a bare GPU host).
test-agent: $(STAMP)
	$(PY) -m pytest tests/agents -q -p no:django --confcutdir=tests/agents

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=true $(PY) manage.py check
	DEBUG=true $(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/lint-imports --no-cache
	$(PY) .ci/import_cycles.py
	$(PY) .ci/readings_door.py
	$(PY) .ci/own_models.py
	$(PY) .ci/engine_differences.py
	$(PY) .ci/template_layers.py
	$(PY) .ci/function_length.py
	$(PY) .ci/private_names.py

# Production-style serving: one Daphne per core on one socket (needs REDIS_URL for more than one).
serve: $(STAMP) messages
	$(PY) manage.py migrate --noinput
	$(PY) manage.py serve --host 127.0.0.1 --port 8000

# A small lab on one machine: web server, Celery worker and beat in one supervised process tree,
# no Redis needed (the broker is kept in files under var/). Needs SECRET_KEY and ALLOWED_HOSTS
# (docs/production.md, "A small lab"). Ctrl-C stops all of it.
HOST ?= 127.0.0.1
PORT ?= 8000
serve-small: $(STAMP) messages
	$(PY) manage.py run --host $(HOST) --port $(PORT)

worker: $(STAMP)
	$(VENV)/bin/celery -A portal worker -l info

beat: $(STAMP)
	$(VENV)/bin/celery -A portal beat -l info

bench: bench-agent bench-agent-diagnose bench-ingest bench-ingest-commands bench-anomaly bench-live bench-pipeline bench-pipeline-jobs bench-pages bench-reports bench-usage bench-wear bench-checklists

bench-agent: $(STAMP)
	$(PY) bench/agent.py

# Remote write (Prometheus) against the agents' path, same run; BENCH_SECONDS=600 for the long run.
bench-remote-write: $(STAMP)
	$(PY) bench/remote_write.py

# The web side of a remote write in process (CPU per sample beside the agents' per value).
bench-remote-write-cpu: $(STAMP)
	$(PY) bench/remote_write_cpu.py --asgi

# The agent's catch-up after an outage, against the real portal (SQLite, scratch VAR_DIR).
bench-agent-portal: $(STAMP)
	$(PY) bench/agent.py catch-up --portal

# Collection interval jitter with no diagnostic / level 1 / level 3 beside it (simulator, ~3 minutes).
bench-agent-diagnose: $(STAMP)
	$(PY) bench/agent_diagnose.py

# Needs the local PostgreSQL and Redis; uses a scratch database bench_ingest.
bench-ingest: $(STAMP)
	$(PY) bench/ingest.py

# CPU per reading of each process and stage: the web side's ingest (decode+validate, convert, write,
# answer; the previous decoding path beside the current one), PostgreSQL's backends meanwhile, the
# pipeline's stages and their database, and the end-to-end bound on 2 cores; on SQLite and on the local
# PostgreSQL (scratch database bench_ingest_cpu, or BENCH_PG_DB). BENCH_AGAINST=<git revision> runs the
# same on that revision's code too and prints the two side by side (e.g. BENCH_AGAINST=main).
bench-ingest-cpu: $(STAMP)
	$(PY) bench/ingest_cpu.py $(if $(BENCH_AGAINST),--against $(BENCH_AGAINST))

# What commands in the ingest answer cost: CPU per reading and queries per batch without the
# lookup, with nothing queued, and with a diagnostic waiting for the agent, side by side.
bench-ingest-commands: $(STAMP)
	$(PY) bench/ingest_commands.py

bench-anomaly: $(STAMP)
	$(PY) bench/anomaly.py

bench-live: $(STAMP)
	$(PY) bench/live.py

# The fleet page at 1,000 and 5,000 GPUs beside the host, GPU and on-demand pages (scratch SQLite).
bench-pages: $(STAMP) browser
	$(PY) bench/fleet_page.py
	$(PY) bench/page_weight.py
	$(PY) bench/page_weight.py --mode demo
	$(PY) bench/page_weight.py --mode debug

# Ingested + evaluated + rolled up per second with worker and beat running: the embedded default
# (SQLite, broker in files) and production (PostgreSQL scratch database bench_pipeline, Redis db 13).
bench-pipeline: $(STAMP)
	$(PY) bench/pipeline.py

# The embedded pipeline on revision REV's code and on this tree's, alternating (ROUNDS each, 3 by
# default), in one run: a refactor's before/after (bench/against.py).
bench-pipeline-against: $(STAMP)
	@test -n "$(REV)" || { echo "REV=<git revision> is needed"; exit 2; }
	$(PY) bench/against.py $(REV) embedded $(or $(ROUNDS),3)

# The pipeline with 4 jobs on every reading against none, in one run; then the span stage's cost per
# reading and the jobs API and page with 100,000 spans stored (bench/jobs.py).
bench-pipeline-jobs: $(STAMP)
	$(PY) bench/pipeline.py jobs embedded
	$(PY) bench/jobs.py --postgres

# The production cluster of deploy/ on this machine (its own PostgreSQL and Redis, nginx in front
# of 2 web nodes, 2 worker nodes, beat) under SOAK_AGENTS (200) simulated agents for SOAK_SECONDS
# (600) with faults injected; a table of what was lost (docs/production.md, "Soak"). Minutes, not
# in CI: tests/deploy/test_soak.py runs a 60-second version of it.
soak: $(STAMP)
	$(PY) bench/soak.py

# The reliability report for 1,000 GPUs over a year with 5 years of history (JSON < 1 s, PDF < 5 s):
# a temporary SQLite database; `.venv/bin/python bench/reports.py --postgres` for PostgreSQL.
bench-reports: $(STAMP)
	$(PY) bench/reports.py

# The usage report for 1,000 GPUs over 30 days of job spans (< 2 s, a constant query count), on
# PostgreSQL: DATABASE_URL's database, dropped and seeded again (default: scratch database bench_usage).
bench-usage: $(STAMP)
	$(PY) bench/usage.py

# "My work" and a run's page with 1,000 GPUs and 10,000 past runs (temporary SQLite; DATABASE_URL to choose).
bench-checklists: $(STAMP)
	$(PY) bench/checklists.py

clean:
	rm -rf $(VENV) var .pytest_cache test-artifacts

# Bytes per raw reading, today's layout beside the partitioned, compact one (10 million readings,
# scratch PostgreSQL database bench_storage; several minutes); then the whole database.
bench-storage: $(STAMP)
	$(PY) bench/storage.py
	$(PY) bench/storage.py database

# The whole database per reading as a lab keeps data (64 GPUs, 46 h of simulated history posted
# as the agent batches at its defaults, through ingest and the pipeline, beat's jobs and autovacuum
# on simulated time, then the days over compressed), table by table, the bookkeeping beside its
# target, and a GPU's steady state under the default retention (scratch PostgreSQL database
# bench_storage_db, BENCH_DB_NAME; BENCH_DB_HOURS, BENCH_DB_BATCH_S; ~25 minutes on 2 quiet cores).
bench-storage-db: $(STAMP)
	$(PY) bench/storage.py database

# 54 million readings over 15.6 days (400 GPUs at 1/10 s): dropping a day, a 24 h chart, the rules'
# read of a batch (scratch PostgreSQL database bench_retention, 8.5 GB; ~20 minutes).
bench-retention: $(STAMP)
	$(PY) bench/storage.py retention

# Wear for a year of 1 Hz readings, /metrics for 1,000 GPUs, ingest with and without the wear
# meters side by side (scratch PostgreSQL database bench_wear).
bench-wear: $(STAMP)
	$(PY) bench/wear.py
