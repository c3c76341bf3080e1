from django.urls import path

from portal.enrolment import views

app_name = "enrolment"

urlpatterns = [
    path("", views.AddHostsView.as_view(), name="add_hosts"),
    path("codes/<int:pk>/revoke/", views.RevokeView.as_view(), name="revoke"),
]
