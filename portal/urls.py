from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.decorators.cache import never_cache
from django.views.i18n import JavaScriptCatalog

from portal.accounts.directory import views as directory_views
from portal.accounts.directory.oidc import OIDCCallbackView, OIDCStartView
from portal.accounts.views import set_language
from portal.api import api_urls
from portal.core.views import favicon, healthz
from portal.metrics.views import metrics
from portal.telemetry.ingest_view import ingest

urlpatterns = [
    path("login/", directory_views.LoginView.as_view(), name="login"),
    path("logout/", directory_views.LogoutView.as_view(), name="logout"),
    # OpenID Connect sign-in (404 unless OIDC_ISSUER is set).
    path("oidc/authenticate/", login_not_required(OIDCStartView.as_view()), name="oidc_authentication_init"),
    path("oidc/callback/", login_not_required(OIDCCallbackView.as_view()), name="oidc_authentication_callback"),
    path("healthz", never_cache(healthz), name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
    path("i18n/setlang/", set_language, name="set_language"),
    # The live pages' strings in the user's language (Django's JavaScript catalogue).
    path("jsi18n/", login_not_required(JavaScriptCatalog.as_view()), name="javascript_catalog"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/ingest", ingest, name="ingest"),
    path("api/v1/", api_urls()),
    path("audit/", include("portal.audit.urls")),
    path("account/", include("portal.accounts.urls")),
    path("tickets/", include("portal.maintenance.urls")),
    path("wear/", include("portal.wear.urls")),
    path("jobs/", include("portal.jobs.urls")),
    path("live/", include("portal.live.urls")),
    path("reports/", include("portal.reports.urls")),
    path("checklists/", include("portal.checklists.urls")),
    path("scheduler/", include("portal.scheduler.urls")),
    path("diagnostics/", include("portal.diagnostics.urls")),
    path("add-hosts/", include("portal.enrolment.urls")),
    path("agent/", include("portal.enrolment.agent_urls")),
    path("guide/", include("portal.guidance.urls")),
    path("", include("portal.telemetry.urls")),
    path("", include("portal.fleet.urls")),
]
