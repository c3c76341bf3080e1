"""How the portal's processes run, apart from what they do: the supervisor and `manage.py run` /
`serve`, what a start prepares under VAR_DIR, the one beat per cluster, the embedded broker's
transport and the frozen start-up heap. No domain code: it imports only portal.core, and only the
entry points (portal.celery, portal.asgi, the demo) import it."""
