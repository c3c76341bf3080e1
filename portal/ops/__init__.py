"""How the portal's processes run, apart from what they do: the supervisor and `manage.py run` /
`serve`, what a start prepares under VAR_DIR, the one beat per cluster, the embedded broker's
transport and the frozen start-up heap. No domain code: it imports only portal.core, and only the
entry points (portal.celery, portal.asgi, the demo) import it.

Production runs systemd units (deploy/systemd); `run` is for the small lab and the demo, where
honcho (it stops everything when one process exits, and cannot wait for /healthz) and supervisord
(a daemon with its own configuration and control socket) fit worse than the small supervisor here.
The beat lock lives in the database every node shares: celery-redbeat and single-beat lock in
Redis, which the embedded default has none of.
"""
