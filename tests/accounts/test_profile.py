"""The account page: a user's role and personal API tokens (minted there, shown once)."""

import pytest

from portal.accounts.models import ApiToken
from portal.accounts.services import api_token_authenticate, api_token_issue


@pytest.mark.parametrize("role", ["admin", "technician", "viewer", "outsider"])
def test_every_user_mints_their_own_token_shown_once(client_for, request, role):
    user = request.getfixturevalue(role)
    response = client_for(user).post("/account/", {"label": "scripts"})

    assert response.status_code == 201
    secret = response.context["new_token"]
    assert secret in response.content.decode()
    assert api_token_authenticate(secret) == user
    assert ApiToken.objects.get(user=user).label == "scripts"
    assert secret not in client_for(user).get("/account/").content.decode()


def test_a_label_too_long_is_a_400_naming_the_field(client_for, viewer):
    response = client_for(viewer).post("/account/", {"label": "x" * 101})

    assert response.status_code == 400
    assert "label" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_revoke_only_your_own_tokens(client_for, viewer, technician):
    mine, my_token = api_token_issue(user=viewer)
    theirs, their_token = api_token_issue(user=technician)
    client = client_for(viewer)

    assert client.post(f"/account/tokens/{their_token.pk}/revoke/").status_code == 404
    assert api_token_authenticate(theirs) == technician
    assert client.post(f"/account/tokens/{my_token.pk}/revoke/").status_code == 302
    assert api_token_authenticate(mine) is None


def test_anonymous_is_sent_to_log_in(client):
    response = client.get("/account/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
