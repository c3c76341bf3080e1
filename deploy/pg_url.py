"""DATABASE_URL for libpq without its password on any command line: used by backup.sh and restore.sh.

Reads DATABASE_URL from the environment (never an argument: a command line is visible to every
user of the machine in `ps`). Prints the URL with the password taken out, userinfo and
`password=` query parameter alike; writes the password, when there is one, to the pgpass file
named by the one argument, created 0600 (libpq reads it through PGPASSFILE). Standard library
only: it runs with any python3.
"""

import os
import sys
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit


def main(passfile: str) -> int:
    url = urlsplit(os.environ["DATABASE_URL"])
    netloc, password = url.netloc, None
    if "@" in netloc:
        userinfo, hostport = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user, password = userinfo.split(":", 1)
            password = unquote(password)
            netloc = f"{user}@{hostport}"
    query = url.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(name == "password" for name, _ in pairs):
        password = next(value for name, value in reversed(pairs) if name == "password")
        query = urlencode([(name, value) for name, value in pairs if name != "password"], quote_via=quote)
    if password:
        if "\n" in password or "\r" in password:
            print("DATABASE_URL: a password with a line break cannot go into a pgpass file", file=sys.stderr)
            return 2
        escaped = password.replace("\\", "\\\\").replace(":", "\\:")
        with open(os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(f"*:*:*:*:{escaped}\n")
    print(urlunsplit(url._replace(netloc=netloc, query=query)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
