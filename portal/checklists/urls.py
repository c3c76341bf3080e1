from django.urls import path

from portal.checklists import views

app_name = "checklists"

urlpatterns = [
    path("", views.MyWorkView.as_view(), name="my_work"),
    path("start/", views.RunStartView.as_view(), name="start"),
    path("runs/", views.RunListView.as_view(), name="runs"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run"),
    path("photos/<int:pk>/", views.PhotoView.as_view(), name="photo"),
]
