"""The meters' pure parts: the turning-point reduction never changes the hysteresis, and busy
streak segments compose exactly."""

import random

import pytest

from portal.wear.meters import Hysteresis, Streak, Turns


def _replay(temps, start):
    h = Hysteresis(*start)
    for t in temps:
        h.push(t)
    return h.high, h.ref, h.count


@pytest.mark.parametrize("seed", range(40))
def test_turning_points_keep_the_hysteresis_for_any_incoming_state(seed):
    rng = random.Random(seed)
    temps, level = [], rng.uniform(30, 80)
    for _ in range(rng.randint(1, 400)):
        if rng.random() < 0.05:
            level = rng.uniform(25, 90)  # a swing (maybe ≥ 30 °C)
        temps.append(round(level + rng.uniform(-8, 8)))  # wiggles under 30 °C
    turns = Turns()
    for i, t in enumerate(temps):
        turns.push(i, float(t))
    reduced = [p[1] for p in turns.points]
    assert reduced[0] == temps[0] and reduced[-1] == temps[-1]
    for start in [(False, None, 0), (False, rng.uniform(20, 90), 3), (True, rng.uniform(20, 95), 7)]:
        assert _replay(reduced, start) == _replay(temps, start)


def test_wiggles_collapse():
    turns = Turns()
    for i in range(3600):
        turns.push(i, 60.0 + (i % 7) - 3)
    assert len(turns.points) <= 4


def test_streak_segments_compose():
    rng = random.Random(1)
    pairs = [rng.choice([None, 1.0, 2.0, 5.0]) for _ in range(500)]
    whole = Streak()
    for p in pairs:
        whole.add(p)
    cut = [0, 17, 18, 200, 201, 350, 500]
    composed = None
    for a, b in zip(cut, cut[1:], strict=False):
        part = Streak()
        for p in pairs[a:b]:
            part.add(p)
        composed = part if composed is None else composed.then(part)
    assert composed.longest == whole.longest
