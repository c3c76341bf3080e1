"""The temperature limits named once (portal/fleet/care.py): the wear contract's hot stays
slowdown − 10 °C (80 °C when unknown), and the rules and the pages read the same names."""

from portal.fleet import care
from portal.maintenance.rules.gpu import NoRest, Overheat
from portal.wear import meters


def test_wear_hot_is_the_contracts_figure():
    assert meters.hot_threshold(90) == care.wear_hot_c(90) == 80
    assert meters.hot_threshold(87) == 77
    assert meters.hot_threshold(None) == 80


def test_the_rules_limits_are_the_care_limits():
    params = dict(Overheat.defaults)
    assert Overheat.open_at_c(slowdown_c=90, params=params) == 85
    assert Overheat.open_at_c(slowdown_c=None, params=params) == care.UNKNOWN_SLOWDOWN_C - care.OVERHEAT_MARGIN_C == 83
    assert care.below_slowdown_c(None, margin_c=NoRest.defaults["hot_margin_c"]) == 73


def test_an_override_moves_the_rule_limit():
    params = {**Overheat.defaults, "open_margin_c": 8, "unknown_slowdown_c": 85}
    assert Overheat.open_at_c(slowdown_c=90, params=params) == 82
    assert Overheat.open_at_c(slowdown_c=None, params=params) == 77
