from django.urls import path

from portal.maintenance import views

app_name = "maintenance"

urlpatterns = [
    path("", views.TicketListView.as_view(), name="tickets"),
    path("<int:pk>/", views.TicketDetailView.as_view(), name="ticket"),
    path("silences/", views.SilenceListView.as_view(), name="silences"),
    path("rules/", views.RuleListView.as_view(), name="rules"),
    path("subscriptions/", views.SubscriptionListView.as_view(), name="subscriptions"),
]
