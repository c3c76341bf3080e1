"""What wear adds to a GPU's page (portal.core.panels): its lifetime meters and charts."""

from portal.core.panels import panel
from portal.wear import selectors


@panel("fleet.gpu", slot="main", name="wear", template="wear/_gpu_panel.html", order=10)
def gpu_wear(*, gpu, **page) -> dict | None:
    return selectors.gpu_wear_panel(gpu=gpu) or None
