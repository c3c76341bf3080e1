"""Static files compressed and hashed: in production (DEBUG off) and in the demo.

`collectstatic` writes hashed names browsers keep for ever, brotli and gzip copies beside each.
WhiteNoise's own storage compresses every file twice (the plain name and the hashed one), source
maps included: ~38 s of CPU over 36 MB at each deploy and at a new portal's first start. The
pages only ever name the hashed files ({% static %} through the manifest), so these storages
compress only those, no source maps (only a developer's tools ask for them, and they get them
uncompressed); the plain copies are still collected and served. Production keeps brotli's best
quality (its files are compressed once a deploy); the demo uses quality 9 (15x faster than 11,
~8 % larger: plotly.js 410 → 444 KB), and `static_collect` runs `collectstatic` only when the
sources changed since the last run wrote its stamp under STATIC_ROOT.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import brotli
from django.conf import settings
from django.contrib.staticfiles.finders import get_finders
from django.core.management import call_command
from whitenoise.compress import Compressor
from whitenoise.storage import CompressedManifestStaticFilesStorage

BROTLI_QUALITY = 9
HASHED = re.compile(r"\.[0-9a-f]{12}\.[^/]+$")
STAMP = ".sources-digest"
IGNORE = ["CVS", ".*", "*~"]  # collectstatic's own default ignore patterns


class QuickCompressor(Compressor):
    @staticmethod
    def compress_brotli(data: bytes) -> bytes:
        return brotli.compress(data, quality=BROTLI_QUALITY)


class ProductionStaticFilesStorage(CompressedManifestStaticFilesStorage):
    def compress_files(self, paths):
        wanted = [path for path in paths if HASHED.search(path) and not path.endswith(".map")]
        return super().compress_files(wanted)


class DemoStaticFilesStorage(ProductionStaticFilesStorage):
    def url(self, name, force=True):
        # Django's manifest storage names the plain file while DEBUG is on; the demo's browsers
        # should get the hashed one, which WhiteNoise marks immutable.
        return super().url(name, force=force)

    def create_compressor(self, **kwargs) -> Compressor:
        return QuickCompressor(**kwargs)


def static_sources_digest() -> str:
    """Every file the finders would collect (name, size, modification time) and the storage that
    would write them: a change to any changes the digest."""
    digest = hashlib.sha256(settings.STORAGES["staticfiles"]["BACKEND"].encode())
    entries = []
    for finder in get_finders():
        for path, storage in finder.list(IGNORE):
            stat = os.stat(storage.path(path))
            entries.append(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}")
    digest.update("\n".join(sorted(entries)).encode())
    return digest.hexdigest()


def static_collect() -> bool:
    """`collectstatic`, unless the files under STATIC_ROOT were collected from the same sources by
    the same storage (a restarted demo or portal then starts at once). True when it collected."""
    root = Path(settings.STATIC_ROOT)
    stamp = root / STAMP
    digest = static_sources_digest()
    if (root / "staticfiles.json").exists() and stamp.exists() and stamp.read_text() == digest:
        return False
    call_command("collectstatic", interactive=False, verbosity=0)
    stamp.write_text(digest)
    return True
