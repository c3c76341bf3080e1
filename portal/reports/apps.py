from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "portal.reports"
    label = "reports"

    def ready(self):
        from portal.fleet import pages
        from portal.reports.panels import gpu_page_panel

        pages.on_page("gpu", "reports")(gpu_page_panel)
