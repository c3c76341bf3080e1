"""Settings for the GPU Fleet Portal.

Everything comes from environment variables (see the table in docs/configuration.md). The defaults are
production-safe (DEBUG off, so SECRET_KEY is required) and need no server: SQLite under var/, the
in-memory channel layer, and a Celery broker kept in files under var/ (`manage.py run` starts
the web server, a worker and beat on it). Production adds DATABASE_URL and REDIS_URL. The demo
and the tests turn on DEBUG themselves.
"""

import base64
import datetime as dt
import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_HASHES
from django.core.exceptions import ImproperlyConfigured

from portal.directory_settings import directory_settings
from portal.env import env_email_url, env_networks_check, env_trust_proxy, envbool, envint, envlist, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", False)
# The demo app (`manage.py demo`, `seed_demo`: a made-up fleet and users) is installed only for
# development or a deliberate showcase, so a production install cannot seed its database by mistake.
DEMO = envbool("DEMO", False)

SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "django-insecure-dev-only-key-never-use-in-production"

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])

# Not "daphne": its app only swaps in an ASGI `runserver`, which nothing here uses (`manage.py run`
# and `serve` start Daphne themselves), and it imports Twisted into every process, a sixth of a
# `manage.py` command's start.
INSTALLED_APPS = [
    "portal.accounts.apps.PortalAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "ninja",  # its Swagger UI files (the API docs page), served by the portal itself
    "auditlog",
    "axes",
    "portal.core",
    "portal.ops",
    "portal.accounts",
    "portal.fleet",
    "portal.audit",
    "portal.telemetry",
    "portal.wear",
    "portal.maintenance",
    "portal.diagnostics",
    "portal.reports",
    "portal.metrics",
    "portal.checklists",
    "portal.scheduler",
    "portal.windows",
    "portal.jobs",
    "portal.enrolment",
    "portal.guidance",
    "portal.inventory",
    "portal.remote_write",
    "portal.live",
]
if DEBUG or DEMO:
    INSTALLED_APPS.append("portal.demo")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language: the cookie set by /i18n/setlang/, else Accept-Language, else LANGUAGE_CODE; a
    # signed-in user's profile language (UserLanguageMiddleware, below) wins over both.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "portal.core.middleware.RejectNulCharactersMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.accounts.middleware.UserLanguageMiddleware",
    # A directory account's role asked again while it is signed in (LIVE_RECHECK_S).
    "portal.accounts.middleware.DirectoryRecheckMiddleware",
    # Every page needs a login unless its view opts out (login page, agent ingest).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "portal.core.middleware.NotFoundPageMiddleware",  # after CommonMiddleware (its slash redirect)
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.core.middleware.AuditlogMiddleware",  # the client address as the server believes it
    # Login throttling (django-axes): answers a locked-out login with the lockout page. Last, as its docs ask.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy on every response (django-csp 4.x settings format). No inline
# scripts: page scripts live in static/<app>/ and take their data from json_script. No inline
# styles either: markup takes classes from static/ stylesheets. 'self' covers the live pages'
# ws:/wss: to the same host (CSP Level 3, as Chromium does).
EMPTY_STYLE_HASH = f"'sha256-{base64.b64encode(hashlib.sha256(b'').digest()).decode()}'"  # sha256 of ""
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "connect-src": [SELF],
        # Stylesheets only, no style="…" attributes or <style> elements (scripts set styles
        # through the CSSOM, which CSP allows). plotly.js's own rules are files too
        # (templates/core/_plotly.html).
        "style-src": [SELF],
        # One attribute value is allowed: plotly.js clears its colorbar's fill rectangles with
        # setAttribute("style", ""). The hash of "" matches exactly style="" and nothing else
        # ('unsafe-hashes' lets hashes match attributes at all).
        "style-src-attr": [UNSAFE_HASHES, EMPTY_STYLE_HASH],
        "img-src": [SELF, "data:"],  # Plotly's modebar icons and image export are data: URIs
        "object-src": [NONE],
        "frame-ancestors": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],  # an injected <form> can't post what the user types to another site
    }
}

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.accounts.context_processors.roles",
            ],
        },
    },
]

DATABASE_URL = envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        # SQLite: a connection is a file handle, and opening one (with its PRAGMAs) for every
        # request cost ingest as much CPU as storing the batch. A server's connections are
        # the operator's to size (PostgreSQL: max_connections, a pooler): off unless set.
        conn_max_age=envint("DATABASE_CONN_MAX_AGE", 600 if DATABASE_URL.startswith("sqlite") else 0),
        # A kept connection is checked before its first use in a request: after a PostgreSQL
        # restart each kept connection (one per thread of ingest's pool) would otherwise fail
        # its next request with a 503, for as long as DATABASE_CONN_MAX_AGE (found by the soak).
        conn_health_checks=True,
    )
}
# The few statements run for every ingest batch are prepared once per connection (see
# portal/core/db.py); off behind a pooler in transaction mode that can't keep them.
DATABASE_PREPARED_STATEMENTS = envbool("DATABASE_PREPARED_STATEMENTS", True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's, reading timestamps with psycopg's compiled loader (portal/core/postgresql_backend).
    DATABASES["default"]["ENGINE"] = "portal.core.postgresql_backend"
if DATABASES["default"]["ENGINE"] == "portal.core.postgresql_backend" and DATABASE_PREPARED_STATEMENTS:
    # Django leaves psycopg's prepare_threshold at None, which refuses even an explicit
    # prepare=True. Django's own cursors bind on the client and never prepare, so this only
    # lets the hot cursors (which ask explicitly) prepare; the threshold itself never triggers.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 1_000_000)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # WAL and a busy timeout let the web server, the worker and beat write side by side; the
    # backend waits for the write lock in short steps (see portal/core/sqlite_backend/base.py).
    DATABASES["default"]["ENGINE"] = "portal.core.sqlite_backend"
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
# Log (logger portal.sqlite) each transaction that waited for or held the SQLite write lock at
# least this long, with the code that ran it; 0: off. A developer's tool for finding what delays
# ingest: set it in a settings module of one's own that imports this one.
SQLITE_SLOW_LOCK_MS = 0.0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = envstr("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [REDIS_URL],
                # Live messages are coalesced upstream, so a small capacity is plenty; a slow
                # browser loses old frames instead of growing Redis without bound.
                "capacity": 200,
                "expiry": 30,
                "group_expiry": 3600,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 200}}}

# Without REDIS_URL the broker is kombu's filesystem transport, as portal.ops.broker writes it
# (each message whole, then renamed into place): one file per message under VAR_DIR/broker,
# polled every 100 ms by the worker: publishing takes no database write lock, so a task
# sent from ingest never waits behind SQLite's writers.
EMBEDDED_BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 1, "socket_timeout": 2}
else:
    CELERY_BROKER_URL = "portalfs://localhost//"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(EMBEDDED_BROKER_DIR / "queue"),
        "data_folder_out": str(EMBEDDED_BROKER_DIR / "queue"),
        "control_folder": str(EMBEDDED_BROKER_DIR / "control"),
        "polling_interval": 0.1,
    }
    for _folder in ("queue", "control"):
        (EMBEDDED_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# Beat keeps the last run of each entry here, so a restart doesn't reset hourly tasks.
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Tasks go to the worker; the unit tests' settings (tests/settings.py) run them where they are sent.
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Tasks are sent from request paths (ingest's after-commit hook): with the broker down, sending
# must fail fast and be logged, not hold the agent's request for seconds. Beat tasks catch up.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
CELERY_BEAT_SCHEDULE: dict = {
    "pipeline-sweep": {"task": "portal.telemetry.tasks.pipeline_sweep_task", "schedule": 30.0},
    "remote-write-hand-on": {"task": "portal.remote_write.tasks.remote_readings_hand_on_task", "schedule": 10.0},
    "telemetry-prune": {"task": "portal.telemetry.tasks.telemetry_prune_task", "schedule": 3600.0},
    "wear-hours-fold": {"task": "portal.wear.tasks.wear_hours_fold_task", "schedule": 3600.0},
    "jobs-watch": {"task": "portal.jobs.tasks.jobs_watch_task", "schedule": 60.0},
    "jobs-slurm-lookup": {"task": "portal.jobs.tasks.jobs_slurm_lookup_task", "schedule": 60.0},
    "maintenance-agent-silent": {"task": "portal.maintenance.tasks.agent_silent_check_task", "schedule": 60.0},
    "maintenance-xid-quiet": {"task": "portal.maintenance.tasks.xid_quiet_check_task", "schedule": 600.0},
    "maintenance-schedules": {"task": "portal.maintenance.tasks.schedules_check_task", "schedule": 3600.0},
    "maintenance-notify": {"task": "portal.maintenance.tasks.notifications_pending_sweep_task", "schedule": 60.0},
    "checklists-verifications": {"task": "portal.checklists.tasks.verifications_finish_task", "schedule": 600.0},
    "scheduler-sweep": {"task": "portal.scheduler.tasks.scheduler_sweep_task", "schedule": 30.0},
    "diagnostics-expire": {"task": "portal.diagnostics.tasks.diagnostics_expire_task", "schedule": 60.0},
    # Planned maintenance windows: start the due ones (within a minute), their Slurm reservations.
    "windows-beat": {"task": "portal.windows.tasks.windows_beat_task", "schedule": 30.0},
    # Daily in effect: a contract gets its "Warranty ending" ticket once (claimed); hourly catches a missed day.
    "inventory-warranties-ending": {"task": "portal.inventory.tasks.warranties_ending_check_task", "schedule": 3600.0},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet:fleet"
LOGOUT_REDIRECT_URL = "login"

# Password guessing on /login/ and /admin/login/ (django-axes): after LOGIN_FAILURE_LIMIT failed
# attempts for one user name from one client address, or from one client address whatever the
# names, further attempts from there are refused (HTTP 429, even with the right password) for
# LOGIN_LOCKOUT_MINUTES (0: until an admin lifts it, in the admin under "Axes" or with `manage.py
# axes_reset` / `axes_reset_username NAME`). A success resets the count. Locking a user name from
# every address would let anyone lock the admins out by failing five times.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]

# Lab accounts (portal-api-v1.md, "Sign-in for lab accounts"; portal/accounts/directory/): LDAP
# when LDAP_SERVER_URI is set, OIDC when OIDC_ISSUER is; portal/directory_settings.py reads them.
globals().update(directory_settings(os.environ))
AUTHENTICATION_BACKENDS += [
    *(["portal.accounts.directory.ldap.PortalLDAPBackend"] if LDAP_ENABLED else []),  # noqa: F821
    *(["portal.accounts.directory.oidc.PortalOIDCBackend"] if OIDC_ENABLED else []),  # noqa: F821
]
if OIDC_ENABLED:  # noqa: F821
    # Signing out (a form) ends at the provider's end_session_endpoint: the CSP lets the form's
    # redirect go there (Chromium applies form-action to redirects).
    _issuer = urlsplit(OIDC_ISSUER)  # noqa: F821
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(f"{_issuer.scheme}://{_issuer.netloc}")
if LDAP_ENABLED:  # noqa: F821 (from directory_settings)
    # LDAP accounts' groups read again without a sign-in: a lost role group ends their sessions.
    CELERY_BEAT_SCHEDULE["accounts-ldap-sync"] = {
        "task": "portal.accounts.tasks.ldap_accounts_sync_task",
        "schedule": LDAP_SYNC_MINUTES * 60.0,  # noqa: F821
    }

AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=envint("LOGIN_LOCKOUT_MINUTES", 15)) or None
# One user name from one address, and one address guessing many names; never a user name from
# everywhere (five failures from anywhere would lock the admins out).
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# The client address is REMOTE_ADDR, which portal.core.forwarded sets from X-Forwarded-For only when
# TRUST_PROXY_HEADERS is on (and the value is an address): axes must not read the header itself.
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]

LANGUAGE_CODE = envstr("LANGUAGE_CODE", "en")
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# The catalogues a start compiles (portal.ops.startup: the .po files of locale/, under VAR_DIR since
# the code may be read-only) come first; locale/ itself holds .mo files only where `make messages` ran.
LOCALE_PATHS = [VAR_DIR / "locale", BASE_DIR / "locale"]
# The date formats the pages print with (SHORT_DATE_FORMAT, SHORT_DATETIME_FORMAT): ISO order in
# every language.
FORMAT_MODULE_PATH = ["portal.core.formats"]
if LANGUAGE_CODE not in dict(LANGUAGES):
    raise ImproperlyConfigured(f"LANGUAGE_CODE must be one of {', '.join(dict(LANGUAGES))}, not {LANGUAGE_CODE!r}")
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# Static files collected under hashed names (cached by browsers for ever) with brotli and gzip
# copies of the hashed ones (portal/core/staticfiles.py): always with DEBUG off, and in the demo
# (DEMO, which manage.py sets for it: its GPU page loads ~0.45 MiB, not 1.5), whose storage
# compresses less and faster. `manage.py run` and `demo` collect them first, only when the sources
# changed. A developer's DEBUG serves the source files as they change.
STATIC_COMPRESSED = not DEBUG or DEMO
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "portal.core.staticfiles.ProductionStaticFilesStorage"
        if not DEBUG
        else "portal.core.staticfiles.DemoStaticFilesStorage"
        if DEMO
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
# Uncompressed, WhiteNoise serves straight from the apps' static folders (no collectstatic
# needed); it still wants its root to exist.
WHITENOISE_USE_FINDERS = not STATIC_COMPRESSED
if not STATIC_COMPRESSED:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
MEDIA_ROOT = Path(envstr("MEDIA_ROOT", str(VAR_DIR / "media")))
MEDIA_URL = "media/"

# Attachments on maintenance records (photos of a dusty heatsink, RMA paperwork, logs) and photos
# on checklist items (a phone camera's JPEG is 2–6 MB): one limit, as nginx's client_max_body_size
# in front of both is one.
ATTACHMENT_MAX_BYTES = envint("ATTACHMENT_MAX_BYTES", 10 * 1024 * 1024)
CHECKLIST_PHOTO_MAX_BYTES = ATTACHMENT_MAX_BYTES
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024


AUDITLOG_INCLUDE_ALL_MODELS = False

# The portal takes the client address and scheme from X-Forwarded-For/-Port/-Proto (the last
# entry, the proxy's own, and only a real address: portal.core.forwarded) only when told: set it
# only when every request comes through your reverse proxy, since anyone who can reach the portal
# directly could otherwise claim any address. `true`: from any peer; addresses or networks (CIDRs:
# the nginx hosts): only on connections from inside them, so a node reached past the firewall by
# anyone else keeps the connection's own address.
TRUST_PROXY_HEADERS, TRUST_PROXY_HEADERS_FROM = env_trust_proxy("TRUST_PROXY_HEADERS")

# The portal's public base URL, as people and agents reach it (https://gpu-portal.lab.example):
# links in notifications, the agents' install command, the OpenAPI servers. Required with DEBUG
# off (check core.E001: `check --deploy`, `serve` and `run` refuse without it); with DEBUG on, unset
# means the address a request came to (portal.core.public_url).
PORTAL_URL = envstr("PORTAL_URL").strip().rstrip("/")
if PORTAL_URL:
    _portal_url = urlsplit(PORTAL_URL)
    try:
        _portal_url_ok = _portal_url.scheme in ("http", "https") and bool(_portal_url.hostname) and \
            not (_portal_url.path or _portal_url.query or _portal_url.fragment) and _portal_url.port != 0  # fmt: skip
    except ValueError:  # a port that is not a number
        _portal_url_ok = False
    if not _portal_url_ok:
        raise ImproperlyConfigured(
            f"PORTAL_URL must be the portal's public base URL, scheme and host only "
            f"(e.g. https://gpu-portal.lab.example), not {PORTAL_URL!r}"
        )
# Forms posted from the portal's public address pass the CSRF origin check behind a proxy too.
CSRF_TRUSTED_ORIGINS = [PORTAL_URL] if PORTAL_URL else []

# Outgoing mail (ticket notifications): smtp:// (STARTTLS), smtps:// (TLS) or smtp+insecure://
# (neither: a relay on this machine), user and password in the URL; unset: printed to the console.
_email = env_email_url("EMAIL_URL")
EMAIL_BACKEND = _email.pop("BACKEND")
globals().update(_email)
if not DEFAULT_FROM_EMAIL:  # noqa: F821 (from env_email_url)
    # The account the relay knows when it is an address (relays often send only as it), else the
    # portal's own host name.
    _user = EMAIL_HOST_USER  # noqa: F821
    DEFAULT_FROM_EMAIL = _user if "@" in _user else f"gpu-portal@{urlsplit(PORTAL_URL).hostname or 'localhost'}"

# A lab that serves the portal over plain HTTP (a LAN without TLS) says so once: no HTTPS
# redirect, cookies not secure-only, no HSTS, and agents' batches over plain HTTP accepted (their
# host tokens then cross the network in clear). Behind a TLS proxy, TRUST_PROXY_HEADERS gives the
# scheme (X-Forwarded-Proto) instead.
PLAIN_HTTP = envbool("PLAIN_HTTP", False)
if not DEBUG:
    SECURE_SSL_REDIRECT = not PLAIN_HTTP
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = not PLAIN_HTTP
    SECURE_HSTS_SECONDS = 0 if PLAIN_HTTP else 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = not PLAIN_HTTP

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    # One line per task run or per request drowns everything else (the demo's credentials too).
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
    },
}

# Ingest (agent → portal). See shared/protocol/ingest-v1.md.
INGEST_MAX_BODY_BYTES = 1024 * 1024
# Per host token: sustained requests per second and burst. An agent sends one batch per
# interval (a few seconds), so 20 a second only stops a runaway; the burst lets it empty its
# spool quickly after an outage. With REDIS_URL the buckets live in Redis, one limit for every web
# process and node; without it in the one web process (portal/telemetry/ratelimit.py). The benches
# lift both (bench/settings.py).
INGEST_RATE_PER_S = 20.0
INGEST_RATE_BURST = 200
# Oldest reading accepted, in hours: 7 days, so that an agent's spool delivers a long weekend's
# outage. Retention keeps raw readings at least this long (late data is rolled up from them).
INGEST_MAX_AGE_HOURS = envint("INGEST_MAX_AGE_HOURS", 168)
# With DEBUG off, ingest over plain HTTP is refused (403): the host token would cross the network
# in clear. PLAIN_HTTP (above) takes it.
INGEST_ALLOW_HTTP = PLAIN_HTTP
# Prometheus remote write (shared/protocol/prometheus-v1.md): a request's body after snappy, the
# requests per second (and burst) one source may send (Prometheus sends several shards at once),
# and the scrape interval assumed for a GPU until two of its readings show it: a reading is handed
# on when a later one of its GPU has arrived, or two intervals after its first sample.
REMOTE_WRITE_MAX_BODY_BYTES = 8 * 1024 * 1024
REMOTE_WRITE_RATE_PER_S = 100.0
REMOTE_WRITE_RATE_BURST = max(1, round(5 * REMOTE_WRITE_RATE_PER_S))  # five seconds' worth at once
REMOTE_WRITE_SCRAPE_INTERVAL_S = 30.0
# The agent's wheel and its dependency's, served at /agent/ (`manage.py agent_dist` fills it).
AGENT_DIST_DIR = str(VAR_DIR / "agent-dist")
# GPUs one host may register through its agent; past it a batch is refused with a 403.
MAX_GPUS_PER_HOST = envint("MAX_GPUS_PER_HOST", 64)

# The readings API: the most points (time stamps) one answer holds, whatever the resolution.
READINGS_MAX_POINTS = 10_000

# Retention (days) of raw readings and 1-minute rollups; 1-hour rollups are kept.
RETENTION_RAW_DAYS = envint("RETENTION_RAW_DAYS", 14)
RETENTION_1M_DAYS = envint("RETENTION_1M_DAYS", 90)
# PostgreSQL: raw readings older than this (hours) are stored compressed, a row per GPU and hour
# (portal/telemetry/services/compression.py), never those a pipeline stage still needs; readers
# get both alike. At least 1, or the hour being written could be compressed. Short, because the
# space of the raw rows compressed is reused by the rows written next only within their day's
# partition: compressed within the day they were written, a GPU's raw readings take a few hours
# of pages on disk; a day later, a whole day's partition and part of the next.
READINGS_COMPRESS_AFTER_HOURS = 2
# The pipeline after ingest (portal.telemetry.pipeline): a stored batch sends the pipeline task at
# most once per this many seconds per process (each run takes every pending batch); 0: every batch
# (the tests' settings, which look right after a batch).
PIPELINE_DEBOUNCE_S = 0.5

# Live dashboards (portal/live). The publisher sends at most one message per group every
# LIVE_COALESCE_S seconds (GPU, host, tickets) or LIVE_FLEET_COALESCE_S (the one fleet group),
# each with every point since the last, so a big fleet costs Redis and the browsers a few
# messages a second per page whatever its size (why the fleet's is shorter: portal/live/publish.py).
# The channel layer's capacity (200 messages) is then 40-100 s of backlog for a stalled browser
# before frames are dropped, and consumers re-join their group every third of its group expiry
# (3600 s) so a wall screen never expires.
LIVE_COALESCE_S = 0.5
LIVE_FLEET_COALESCE_S = 0.2
# Off: ingest publishes nothing (the fleet page's bench measures pages without it: bench/settings_pages.py).
LIVE_ENABLED = True
# Open sockets check again that their user is still logged in, active and allowed (also at once on
# logout, deactivation and group changes; see portal/live/consumers.py).
LIVE_RECHECK_S = 30
# "Hot" and "silent" on the live pages are the overheat and agent_silent rules' limits in force.

# Maintenance tickets (portal.maintenance): notifications and grouping.
# A failed delivery is tried again after 30 s, doubling, 5 attempts in all (about 8 minutes); a
# fingerprint is notified at most every 30 minutes; a webhook must answer within 5 s.
MAINTENANCE_NOTIFY_MIN_INTERVAL_S = 30 * 60
MAINTENANCE_NOTIFY_MAX_ATTEMPTS = 5
MAINTENANCE_NOTIFY_BACKOFF_S = 30
MAINTENANCE_WEBHOOK_TIMEOUT_S = 5
# Webhook targets (see portal/maintenance/transports.py): private addresses are refused unless
# WEBHOOK_ALLOWED_NETWORKS names `private`; a network (CIDR) there allows any address inside it,
# loopback included; cloud metadata addresses never.
WEBHOOK_ALLOWED_NETWORKS = envlist("WEBHOOK_ALLOWED_NETWORKS", [])
WEBHOOK_ALLOW_PRIVATE = "private" in WEBHOOK_ALLOWED_NETWORKS
WEBHOOK_ALLOWED_NETWORKS = env_networks_check(
    "WEBHOOK_ALLOWED_NETWORKS", [item for item in WEBHOOK_ALLOWED_NETWORKS if item != "private"],
    alternatives="`private` or ",
)  # fmt: skip
# /metrics (portal.metrics): the scrape job's bearer token; unset, /metrics answers 404.
METRICS_TOKEN = envstr("METRICS_TOKEN", "")
MAINTENANCE_GROUP_FRACTION = 0.5  # more than this share of a host's GPUs firing one rule: one host ticket

# Slurm (the scheduler app): drain a host's node while a ticket of SLURM_DRAIN_SEVERITY (or worse)
# is open on it, resume it after. SLURM_MODE `off` (the default), `cli`: scontrol/sinfo/squeue on
# the PATH; `rest`: slurmrestd at SLURM_REST_URL with a JWT. Checked at start (portal.scheduler.checks).
_slurm_mode = envstr("SLURM_MODE", "off").strip().lower() or "off"
SLURM_ENABLED = _slurm_mode != "off"
SLURM_MODE = _slurm_mode if SLURM_ENABLED else "cli"
# Where the Slurm commands are when not on the PATH (the tests' stand-ins).
SLURM_BIN_DIR = ""
SLURM_REST_URL = envstr("SLURM_REST_URL", "")
SLURM_REST_USER = envstr("SLURM_REST_USER", "")
SLURM_REST_TOKEN = envstr("SLURM_REST_TOKEN", "")
SLURM_DRAIN_SEVERITY = envstr("SLURM_DRAIN_SEVERITY", "critical")
SLURM_TIMEOUT = 10.0  # seconds one command or request may take (pages wait 3 s at most)

# Diagnostics (portal.diagnostics): the level of the diagnostic a new host's GPUs (and a GPU that
# appears later) get when their agent first reports them (0: no burn-in), and the least level a
# passed diagnostic must have for a GPU out for repair to return to service.
BURN_IN_LEVEL = envint("BURN_IN_LEVEL", 1)
RETURN_TO_SERVICE_LEVEL = envint("RETURN_TO_SERVICE_LEVEL", 1)
if not 0 <= BURN_IN_LEVEL <= 3:
    raise ImproperlyConfigured(f"BURN_IN_LEVEL must be 0 (off) to 3, not {BURN_IN_LEVEL}")
if not 1 <= RETURN_TO_SERVICE_LEVEL <= 3:
    raise ImproperlyConfigured(f"RETURN_TO_SERVICE_LEVEL must be 1 to 3, not {RETURN_TO_SERVICE_LEVEL}")
