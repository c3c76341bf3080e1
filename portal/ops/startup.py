"""What a start of the portal prepares under VAR_DIR before it serves: `manage.py serve` and `run`
(and so the demo and the web unit) call `start_prepare()`; a Celery worker, which serves no files,
`start_prepare(web=False)` (the catalogues only: its e-mails and chat messages are translated).

The code may be read-only (the systemd units' ProtectSystem=strict), so whatever a start builds
is written under VAR_DIR: the compiled translation catalogues here, and what higher apps subscribe
to `portal.core.hooks.web_start` in their AppConfig.ready() (the agent's distribution,
portal.enrolment). Each preparation does its work once per change of its sources and is safe when
several processes or nodes start at once: it holds a lock file in its folder and writes every file
under a temporary name in the same folder, renamed into place whole (portal.core.files). What a
start cannot prepare is logged in one line naming what is missing; the start goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings

from portal.core import hooks
from portal.core.files import folder_lock, write_atomic

logger = logging.getLogger("portal.start")


def start_prepare(*, web: bool = True) -> None:
    catalogues_compile()
    if web:
        hooks.web_start.call()


def catalogue_dir() -> Path:
    """Where a start compiles the catalogues (first in LOCALE_PATHS)."""
    return Path(settings.VAR_DIR) / "locale"


def catalogues_compile() -> list[Path]:
    """Compile each locale/<lang>/LC_MESSAGES/<domain>.po of the code into a .mo under
    VAR_DIR/locale, when the .po changed since the last compile (a .sha256 stamp beside the .mo).
    Returns the catalogues compiled now. Without GNU gettext's msgfmt it logs one line and
    compiles nothing (the pages then stay in English)."""
    source = Path(settings.BASE_DIR) / "locale"
    target = catalogue_dir()
    compiled: list[Path] = []
    with folder_lock(target):
        for po in sorted(source.glob("*/LC_MESSAGES/*.po")):
            mo = target / po.relative_to(source).with_suffix(".mo")
            stamp = mo.with_name(mo.name + ".sha256")
            digest = hashlib.sha256(po.read_bytes()).hexdigest()
            if mo.exists() and stamp.exists() and stamp.read_text().strip() == digest:
                continue
            msgfmt = shutil.which("msgfmt")
            if msgfmt is None:
                logger.warning(
                    "translations not compiled: msgfmt (GNU gettext; Debian: apt-get install gettext) is missing, "
                    "so every page is in English"
                )
                return compiled
            mo.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=mo.parent, prefix=f".{mo.name}.", suffix=".tmp")
            os.close(handle)
            try:
                result = subprocess.run(
                    [msgfmt, "--check-format", "-o", temporary, str(po)], capture_output=True, text=True, timeout=120
                )
                if result.returncode != 0:
                    logger.warning("translations not compiled: msgfmt refused %s: %s", po, result.stderr.strip()[-300:])
                    continue
                os.chmod(temporary, 0o644)
                os.replace(temporary, mo)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)
            write_atomic(stamp, digest.encode())
            compiled.append(mo)
    return compiled
