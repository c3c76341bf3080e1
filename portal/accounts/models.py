from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class ApiToken(models.Model):
    """A personal API token: acts as its user, with the user's role. Stored hashed."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.prefix}… ({self.user})"

    def is_expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())


class Source(models.TextChoices):
    """Where an account signs in: the portal's own password, the lab's LDAP directory, or OIDC."""

    LOCAL = "local", pgettext_lazy("account source", "local")
    LDAP = "ldap", pgettext_lazy("account source", "LDAP")
    OIDC = "oidc", pgettext_lazy("account source", "OIDC")


class UserProfile(models.Model):
    """What a user chooses for themselves (the portal's language; empty: the browser's), and where
    the account comes from: a directory account's role follows its groups at every sign-in."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    language = models.CharField(max_length=16, blank=True, choices=settings.LANGUAGES)
    source = models.CharField(_("source"), max_length=8, choices=Source.choices, default=Source.LOCAL)
    # The directory's name for the account: the LDAP DN, or the OIDC issuer and subject.
    directory_id = models.CharField(_("directory identity"), max_length=500, blank=True)
    # Set when the directory took every role away (the account is then inactive); a sign-in with a
    # role again clears it. An admin's own deactivation leaves it empty, and a sign-in never undoes that.
    directory_revoked_at = models.DateTimeField(_("revoked by the directory at"), null=True, blank=True)
    # Until when the directory's last answer stands for this account's role; after it, the next
    # request of any of its sessions or tokens asks again (portal.accounts.directory.recheck).
    directory_vouched_until = models.DateTimeField(null=True, blank=True, editable=False)
    # The OIDC provider's refresh token, to read the role claim again without the user. It is
    # useless without the client secret (settings, not the database): the provider authenticates
    # the client on every refresh.
    directory_refresh_token = models.TextField(blank=True, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "directory_id"],
                condition=~models.Q(directory_id=""),
                name="accounts_profile_unique_directory_id",
            )
        ]

    def __str__(self):
        return f"{self.user} ({self.language or 'browser'})"


class AccountEvent(models.Model):
    """One sign-in, refused sign-in or role change, with where it came from (the audit trail shows
    it). `reason` is a code (portal.accounts.directory.events.REASONS), rendered when shown."""

    class Kind(models.TextChoices):
        SIGN_IN = "sign_in", pgettext_lazy("account event", "sign-in")
        REFUSED = "refused", pgettext_lazy("account event", "refused sign-in")
        ROLE_CHANGE = "role_change", pgettext_lazy("account event", "role change")

    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    source = models.CharField(max_length=8, choices=Source.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="account_events"
    )
    username = models.CharField(max_length=150, blank=True)  # as typed or claimed: data
    reason = models.CharField(max_length=32, blank=True)
    role_before = models.CharField(max_length=16, blank=True)
    role_after = models.CharField(max_length=16, blank=True)
    client = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("account event")
        verbose_name_plural = _("account events")

    def __str__(self):
        # The audit log's name for it, in English as every stored name is ("sign-in: alice (local)")
        words = {"sign_in": "sign-in", "refused": "refused sign-in", "role_change": "role change"}
        return f"{words.get(self.kind, self.kind)}: {self.username} ({self.source})"
