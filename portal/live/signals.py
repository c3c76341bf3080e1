"""Tell a user's open live sockets to check their access again when it may have ended.

Logout closes the sockets of that session at once (the session is flushed right after the signal,
so a re-check could still find it). A saved user (deactivated, password changed) and a change of
groups (a role taken away) make every socket of the user re-check, after the change commits.
The consumers also re-check on a timer (LIVE_RECHECK_S), which covers what sends no signal.
"""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_save

from portal.live.consumers import user_group

log = logging.getLogger(__name__)


def _send(user_id: int, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user_id), message)
    except Exception:  # a layer down must not break a logout or a user save; the timer re-checks
        log.warning("could not tell user %s's live sockets to re-check", user_id, exc_info=True)


def _logged_out(sender, request, user, **kwargs):
    if user is not None:
        session_key = getattr(getattr(request, "session", None), "session_key", None)
        _send(user.pk, {"type": "live.logout", "session_key": session_key})


def _user_saved(sender, instance, created, update_fields=None, **kwargs):
    if not created and set(update_fields or ()) != {"last_login"}:  # not on every login
        transaction.on_commit(lambda: _send(instance.pk, {"type": "live.recheck"}))


def _groups_changed(sender, instance, action, reverse, pk_set, **kwargs):
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    user_ids = list(pk_set or ()) if reverse else [instance.pk]
    transaction.on_commit(lambda: [_send(user_id, {"type": "live.recheck"}) for user_id in user_ids])


def connect() -> None:
    user_model = get_user_model()
    user_logged_out.connect(_logged_out, dispatch_uid="live-logout")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="live-user-saved")
    m2m_changed.connect(_groups_changed, sender=user_model.groups.through, dispatch_uid="live-user-groups")
