from django.urls import path

from portal.windows import views

app_name = "windows"

urlpatterns = [
    path("", views.WindowListView.as_view(), name="list"),
    path("<int:pk>/", views.WindowDetailView.as_view(), name="detail"),
    path("<int:pk>/<str:action>/", views.WindowEndView.as_view(), name="end"),
]
