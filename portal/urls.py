from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.cache import never_cache

from portal.core.views import healthz

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", never_cache(healthz), name="healthz"),
    path("admin/", admin.site.urls),
    path("audit/", include("portal.audit.urls")),
    path("", include("portal.fleet.urls")),
]
