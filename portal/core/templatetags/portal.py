from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def days_since(moment, now=None):
    """Whole days from a datetime (or date) until now; None stays None."""
    if moment is None:
        return None
    now = now or timezone.now()
    if hasattr(moment, "date") and callable(moment.date):
        moment = timezone.localtime(moment).date() if timezone.is_aware(moment) else moment.date()
    return (timezone.localtime(now).date() - moment).days


@register.filter
def age_class(days, due_after_days=90):
    """CSS class for how overdue a periodic task is: ok, due (last 10 %), overdue, never."""
    if days is None:
        return "never"
    due_after_days = int(due_after_days)
    if days > due_after_days:
        return "overdue"
    if days > due_after_days * 0.9:
        return "due"
    return "ok"


@register.filter
def short_uuid(uuid):
    return uuid[4:12] if uuid.startswith("GPU-") else uuid[:8]
