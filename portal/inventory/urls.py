from django.urls import path

from portal.inventory import views

app_name = "inventory"
urlpatterns = [
    path("stock/", views.StockView.as_view(), name="stock"),
    path("warranties/", views.WarrantiesView.as_view(), name="warranties"),
    path("rma/", views.RmaCasesView.as_view(), name="rma_cases"),
    path("rma/<int:pk>/", views.RmaCaseView.as_view(), name="rma_case"),
]
