"""Serve the portal with several Daphne processes on one listening socket.

One Python process uses one core for request handling, so production runs one Daphne per core.
The socket is opened here and handed to each Daphne with --fd; the kernel spreads connections
between them. Several processes need the Redis channel layer (the in-memory one is per process).
Before that, the start prepares what the pages need under VAR_DIR (portal/ops/startup.py).
"""

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.core.public_url import portal_url_errors
from portal.ops.startup import start_prepare

# Addresses that listen on every interface.
WILDCARDS = {"0.0.0.0", "::", "[::]"}


def refuse_without_portal_url() -> None:
    """With DEBUG off a start without PORTAL_URL stops here, naming it (check core.E001)."""
    for error in portal_url_errors():
        raise CommandError(f"{error.id}: {error.msg}; {error.hint}")


def daphne_command(fd: int, access_log: str | None = None) -> list[str]:
    """One Daphne on the inherited socket. Never Daphne's --proxy-headers, which believes the
    leftmost X-Forwarded-For entry whatever it is: the application reads the proxy's headers
    itself, and only with TRUST_PROXY_HEADERS (portal.core.forwarded)."""
    log = ["--access-log", access_log] if access_log else []
    return [sys.executable, "-m", "daphne", "--fd", str(fd), *log, "portal.asgi:application"]


class Command(BaseCommand):
    help = "Serve the portal over HTTP and WebSockets with N Daphne processes sharing one socket."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--access-log", default=None, help="File for the access log (default: stdout).")

    def handle(self, *args, host, port, workers, access_log, **options):
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        if not host.strip():
            # The web unit passes ${WEB_BIND}: unset, it is empty, which would listen everywhere.
            raise CommandError("--host is empty (WEB_BIND unset?): name the address to listen on, e.g. 127.0.0.1")
        if settings.TRUST_PROXY_HEADERS and host in WILDCARDS:
            self.stderr.write(
                f"TRUST_PROXY_HEADERS is on and this node listens on every address ({host}): whoever reaches "
                f"port {port} can claim any client address. Bind to the private address nginx uses (WEB_BIND) "
                "and let only the nginx host through the firewall (docs/production.md)."
            )
        refuse_without_portal_url()
        start_prepare()  # the compiled catalogues and the agent's distribution under VAR_DIR
        if workers > 1 and "InMemoryChannelLayer" in settings.CHANNEL_LAYERS["default"]["BACKEND"]:
            self.stderr.write("REDIS_URL is not set: live pages need one process with the in-memory layer; using 1.")
            workers = 1
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(1024)
        listener.set_inheritable(True)
        fd = listener.fileno()
        command = daphne_command(fd, access_log)
        children = [subprocess.Popen(command, pass_fds=(fd,)) for _ in range(workers)]
        self.stdout.write(f"serving on http://{host}:{port}/ with {workers} Daphne process(es)")

        def stop(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
            raise CommandError("a Daphne process exited; stopping the others")
        except KeyboardInterrupt:
            pass
        finally:
            for child in children:
                if child.poll() is None:
                    child.terminate()
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
            listener.close()
