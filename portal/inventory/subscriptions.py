"""What inventory subscribes to in the lower apps' hooks, and the panels it adds to their pages."""


def connect() -> None:
    pass
