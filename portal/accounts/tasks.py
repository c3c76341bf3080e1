from celery import shared_task


@shared_task(ignore_result=True)
def ldap_accounts_sync_task():
    """Beat (LDAP_SYNC_MINUTES): LDAP accounts' role groups read again. Idempotent: each run
    decides from the directory's answers alone."""
    from portal.accounts.directory.ldap import ldap_accounts_sync

    return ldap_accounts_sync()
