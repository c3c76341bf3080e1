"""The user's language (portal-api-v1.md, "Language"): the profile's, else the browser's
Accept-Language, else LANGUAGE_CODE; POST /i18n/setlang/ switches it (and a signed-in user's
profile); the header offers the switch on every page. The API's field names never change."""

import pytest
from django.test import Client

from portal.accounts.models import UserProfile
from portal.accounts.services import user_language_set

pytestmark = pytest.mark.django_db


def language_of(response) -> str:
    return response.headers.get("Content-Language", "")


def test_default_is_language_code(client_for, viewer):
    assert language_of(client_for(viewer).get("/account/")) == "en"


def test_the_browser_language_when_the_profile_says_nothing(client_for, viewer):
    response = client_for(viewer).get("/account/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")
    assert language_of(response) == "zh-hans"
    assert '<html lang="zh-hans">' in response.content.decode()


def test_the_profile_outranks_the_browser_and_the_cookie(viewer):
    user_language_set(user=viewer, language="zh-hans")
    client = Client()
    client.force_login(viewer)  # the profile's language reaches the session at login
    client.cookies["django_language"] = "en"
    assert language_of(client.get("/account/", HTTP_ACCEPT_LANGUAGE="en")) == "zh-hans"


def test_setlang_switches_a_signed_in_users_profile(client_for, viewer):
    client = client_for(viewer)
    answer = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/account/"})
    assert answer.status_code == 302 and answer["Location"] == "/account/"
    assert UserProfile.objects.get(user=viewer).language == "zh-hans"
    assert language_of(client.get("/account/", HTTP_ACCEPT_LANGUAGE="en")) == "zh-hans"
    client.post("/i18n/setlang/", {"language": "en", "next": "/account/"})
    assert language_of(client.get("/account/", HTTP_ACCEPT_LANGUAGE="zh-CN")) == "en"


def test_setlang_works_signed_out_with_a_cookie(db):
    client = Client()
    answer = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/login/"})
    assert answer.status_code == 302
    page = client.get("/login/")
    assert language_of(page) == "zh-hans"
    assert "登录" in page.content.decode() or 'lang="zh-hans"' in page.content.decode()


@pytest.mark.parametrize("language", ["fr", "", "zh-hant", "<script>"])
def test_setlang_refuses_an_unknown_language_naming_it(client_for, viewer, language):
    answer = client_for(viewer).post("/i18n/setlang/", {"language": language})
    assert answer.status_code == 400 and answer.json()["detail"][0]["loc"] == "language"
    assert not UserProfile.objects.filter(user=viewer).exists()


def test_the_account_page_sets_and_clears_the_language(client_for, viewer):
    client = client_for(viewer)
    assert client.post("/account/language/", {"language": "zh-hans"}).status_code == 302
    assert UserProfile.objects.get(user=viewer).language == "zh-hans"
    assert client.post("/account/language/", {"language": ""}).status_code == 302
    assert UserProfile.objects.get(user=viewer).language == ""
    bad = client.post("/account/language/", {"language": "klingon"})
    assert bad.status_code == 400 and "language" in bad.content.decode()
    assert UserProfile.objects.get(user=viewer).language == ""


def test_every_page_offers_the_switch(client_for, viewer, db):
    for client, path in ((client_for(viewer), "/"), (Client(), "/login/")):
        page = client.get(path, follow=True).content.decode()
        assert 'action="/i18n/setlang/"' in page and "简体中文" in page


def test_the_api_never_changes_with_the_language(client_for, viewer):
    client = client_for(viewer)
    english = client.get("/api/v1/hosts", HTTP_ACCEPT_LANGUAGE="en").json()
    chinese = client.get("/api/v1/hosts", HTTP_ACCEPT_LANGUAGE="zh-CN").json()
    assert english == chinese and set(english) == {"items", "count"}


def test_a_language_code_not_offered_stops_the_start(tmp_path):
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "portal.settings", "VAR_DIR": str(tmp_path),
           "DEBUG": "true", "LANGUAGE_CODE": "fr"}  # fmt: skip
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode != 0 and "LANGUAGE_CODE must be one of en, zh-hans" in result.stderr
