"""The static files storage: WhiteNoise's compressed manifest storage (hashed names, brotli and
gzip beside each file), whose URLs name the hashed files with DEBUG on too (the demo), where
Django's manifest storage would name the plain ones and browsers could keep nothing for long."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class HashedCompressedStaticFilesStorage(CompressedManifestStaticFilesStorage):
    def url(self, name, force=True):
        return super().url(name, force=force)
