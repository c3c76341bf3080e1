#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    if sys.argv[1:2] == ["demo"]:
        # The settings are production-safe by default (DEBUG off, a SECRET_KEY required, no demo
        # app); the demo runs on this machine only and turns DEBUG on for itself and its children,
        # and DEMO, which installs the demo app even where DEBUG was set off.
        os.environ.setdefault("DEBUG", "true")
        os.environ.setdefault("DEMO", "true")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
