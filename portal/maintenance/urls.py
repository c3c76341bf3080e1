app_name = "maintenance"

urlpatterns: list = []
