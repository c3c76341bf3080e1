from django.urls import path

from portal.accounts import views

app_name = "accounts"

urlpatterns = [
    path("", views.ProfileView.as_view(), name="profile"),
    path("language/", views.LanguageView.as_view(), name="language"),
    path("tokens/<int:pk>/revoke/", views.ApiTokenRevokeView.as_view(), name="token_revoke"),
]
