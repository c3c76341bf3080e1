from django.urls import path

from . import views

app_name = "guidance"

urlpatterns = [
    path("", views.GuideIndexView.as_view(), name="index"),
    path("<slug:slug>/", views.PracticeView.as_view(), name="practice"),
]
