from django.urls import path

from portal.enrolment import agent_views

app_name = "agent"

urlpatterns = [
    path("", agent_views.index, name="index"),
    path("install.sh", agent_views.install_script, name="install_sh"),
    path("version", agent_views.version, name="version"),
    path("<str:name>", agent_views.wheel, name="file"),
]
