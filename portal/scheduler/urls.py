from django.urls import path

from portal.scheduler import views

app_name = "scheduler"

urlpatterns = [
    path("hosts/<str:hostname>/drain", views.HostActionView.as_view(), {"kind": "drain"}, name="host_drain"),
    path("hosts/<str:hostname>/resume", views.HostActionView.as_view(), {"kind": "resume"}, name="host_resume"),
    path("tickets/<int:pk>/rest", views.TicketRestView.as_view(), name="ticket_rest"),
]
