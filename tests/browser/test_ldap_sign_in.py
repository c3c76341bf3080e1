"""Directory sign-in in Chromium against a real slapd, as `make demo-ldap` runs it: the login
form takes the directory's people, refuses one in no role group with the reason, and an admin
from the directory sees each user's source and the sign-ins in the audit trail."""

import pytest
from playwright.sync_api import expect

from portal.demo.directory import DEMO_PEOPLE, directory_running, slapd_available
from tests.browser.conftest import ARTIFACTS
from tests.conftest import skip_or_fail
from tests.portal_process import migrate, portal_env, running_portal

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def portal_with_directory(tmp_path_factory):
    if not slapd_available():
        skip_or_fail("slapd and ldap-utils are not installed (apt-get install slapd ldap-utils)")
    var_dir = tmp_path_factory.mktemp("ldap-e2e")
    with directory_running() as directory:
        env = portal_env(var_dir, **directory.settings())
        migrate(env)
        with running_portal(env, var_dir) as portal:
            yield portal


def sign_in(page, base_url, username, password):
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_directory_people_sign_in_and_the_admin_sees_where_they_come_from(browser, portal_with_directory):
    base_url = portal_with_directory.base_url
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page()
    sign_in(page, base_url, "nora", DEMO_PEOPLE["nora"][0])
    expect(page.get_by_role("alert")).to_contain_text("not in any of the portal's role groups")
    page.screenshot(path=str(ARTIFACTS / "ldap-refused.png"), full_page=True)

    sign_in(page, base_url, "tess", DEMO_PEOPLE["tess"][0])
    page.wait_for_url(f"{base_url}/")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{base_url}/login/")

    sign_in(page, base_url, "ada", DEMO_PEOPLE["ada"][0])
    page.wait_for_url(f"{base_url}/")
    page.goto(f"{base_url}/admin/auth/user/")
    rows = page.locator("#result_list tbody tr")
    expect(rows.filter(has_text="tess")).to_contain_text("LDAP")
    expect(rows.filter(has_text="ada")).to_contain_text("LDAP")
    page.screenshot(path=str(ARTIFACTS / "ldap-admin-users.png"), full_page=True)

    page.goto(f"{base_url}/audit/?model=account")
    main = page.locator("main")
    expect(main).to_contain_text("refused sign-in: nora (ldap)")
    expect(main).to_contain_text("sign-in: tess (ldap)")
    expect(main).to_contain_text("role change: ada (ldap)")
    page.screenshot(path=str(ARTIFACTS / "ldap-audit.png"), full_page=True)
    page.close()
