"""Sign-in through the OpenID provider's own login page in Chromium: the portal's button, the
provider's form, back to the portal signed in with the role from the provider's groups, and
signing out at the provider too."""

import pytest
from playwright.sync_api import expect

from portal.demo.directory import free_port
from tests.accounts.conftest import (
    OIDC_CLIENT_SECRET,
    OIDC_PEOPLE,
    OIDC_ROLE_VALUES,
    node_provider_available,
    oidc_provider_running,
)
from tests.browser.conftest import ARTIFACTS
from tests.browser.site_walk import AXE, AXE_RUN, WCAG_TAGS
from tests.conftest import skip_or_fail
from tests.portal_process import migrate, portal_env, running_portal

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def portal_with_provider(tmp_path_factory):
    if not node_provider_available():
        skip_or_fail("node and the oidc-provider npm package are needed (npm ci)")
    var_dir = tmp_path_factory.mktemp("oidc-e2e")
    issuer_port = free_port()
    env = portal_env(
        var_dir,
        OIDC_ISSUER=f"http://127.0.0.1:{issuer_port}",
        OIDC_CLIENT_ID="portal",
        OIDC_CLIENT_SECRET=OIDC_CLIENT_SECRET,
        OIDC_ROLE_VALUES=OIDC_ROLE_VALUES,
        OIDC_SCOPES="openid email profile groups",
    )
    migrate(env)
    with (
        running_portal(env, var_dir) as portal,
        oidc_provider_running(
            var_dir,
            redirect_uris=[f"{portal.base_url}/oidc/callback/"],
            post_logout_redirect_uris=[f"{portal.base_url}/login/"],
            port=issuer_port,
        ) as provider,
    ):
        yield portal, provider


def test_sign_in_through_the_providers_login_page(browser, portal_with_provider):
    portal, provider = portal_with_provider
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page()
    violations = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security" in message.text else None)
    page.goto(f"{portal.base_url}/login/")
    page.screenshot(path=str(ARTIFACTS / "oidc-login.png"), full_page=True)
    assert_accessible(page)
    page.get_by_role("link", name="Sign in with 127.0.0.1").click()

    page.wait_for_url(f"{provider.issuer}/interaction/**")
    expect(page.get_by_role("heading", name="Lab sign-in (test provider)")).to_be_visible()
    page.get_by_label("User name").fill("terry")
    page.get_by_label("Password").fill("a wrong one")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Wrong user name or password.")
    page.get_by_label("User name").fill("terry")
    page.get_by_label("Password").fill(OIDC_PEOPLE["terry"][0])
    page.get_by_role("button", name="Sign in").click()

    page.wait_for_url(f"{portal.base_url}/")
    page.goto(f"{portal.base_url}/account/")
    expect(page.locator("main")).to_contain_text("technician")
    page.screenshot(path=str(ARTIFACTS / "oidc-signed-in.png"), full_page=True)

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{provider.issuer}/session/end**")
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{portal.base_url}/login/")
    page.goto(f"{portal.base_url}/account/")
    assert "/login/" in page.url
    assert violations == []  # signing out through the provider passes the portal's CSP (form-action)
    page.close()


def test_no_role_group_is_refused_with_the_reason_on_the_login_page(browser, portal_with_provider):
    portal, provider = portal_with_provider
    page = browser.new_page()
    page.goto(f"{portal.base_url}/oidc/authenticate/")
    page.get_by_label("User name").fill("olga")
    page.get_by_label("Password").fill(OIDC_PEOPLE["olga"][0])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{portal.base_url}/oidc/callback/**")
    expect(page.get_by_role("alert")).to_contain_text("not in any of the portal's role groups")
    page.screenshot(path=str(ARTIFACTS / "oidc-refused.png"), full_page=True)
    assert_accessible(page)
    page.close()


def assert_accessible(page):
    """The login page with the provider's button and a refusal passes axe-core (WCAG 2.1 A/AA)."""
    if not AXE.exists():
        skip_or_fail(f"{AXE} is missing: run `make axe` (npm ci)")
    page.evaluate(AXE.read_text() + "\n;0")
    assert page.evaluate(AXE_RUN, WCAG_TAGS) == []
