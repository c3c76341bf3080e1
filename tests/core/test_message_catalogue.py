"""The message catalogue: English rendered from the template, the reader's language when shown,
the stored text where there is no message (or one the catalogue no longer knows)."""

import pytest
from django.utils import translation

from portal.core import messages

HELLO = messages.message("tests.hello", "%(who)s said %(what)s (%(pct)s %%)", words={
    "who": messages.Word(english=lambda key: key.upper(), shown=lambda key: f"<{key}>"),
})  # fmt: skip
INNER = messages.message("tests.inner", "a <b>bold</b> %(x)s")


def test_english_and_stored_form():
    said = HELLO(who="ann", what=INNER(x=1), pct=50)
    assert said.stored() == {
        "id": "tests.hello", "params": {"who": "ann", "what": {"id": "tests.inner", "params": {"x": 1}}, "pct": 50},
    }  # fmt: skip
    assert str(said) == "ANN said a <b>bold</b> 1 (50 %)"
    assert messages.text_and_stored(said) == (str(said), said.stored())
    assert messages.text_and_stored("typed") == ("typed", None)


def test_shown_uses_the_words_in_the_active_language_and_falls_back_to_the_text():
    said = HELLO(who="ann", what="hi", pct=5)
    with translation.override("en"):
        assert messages.shown(said.stored(), "stored") == "<ann> said hi (5 %)"
    assert messages.shown(None, "typed") == "typed"
    assert messages.shown({"id": "tests.gone", "params": {}}, "as stored") == "as stored"
    assert messages.shown({"id": "tests.hello", "params": {}}, "as stored") == "as stored"  # a parameter missing


def test_an_id_is_declared_once():
    messages.message("tests.inner", "a <b>bold</b> %(x)s")  # the same declaration again (a module reloaded)
    with pytest.raises(ValueError, match="tests.inner"):
        messages.message("tests.inner", "something else")


def test_a_list_of_messages_is_stored_as_a_list_and_shown_joined():
    said = HELLO(who="ann", what=[INNER(x=1), INNER(x=2)], pct=0)
    assert said.stored()["params"]["what"] == [
        {"id": "tests.inner", "params": {"x": 1}}, {"id": "tests.inner", "params": {"x": 2}},
    ]  # fmt: skip
    assert str(said) == "ANN said a <b>bold</b> 1; a <b>bold</b> 2 (0 %)"
    assert HELLO(who="ann", what=["plain", "data"], pct=0).stored()["params"]["what"] == ["plain", "data"]
