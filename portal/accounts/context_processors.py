from portal.accounts.roles import role_flags


def roles(request):
    return {"role": role_flags(request.user)}
