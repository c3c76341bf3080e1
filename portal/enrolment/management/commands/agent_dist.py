from django.core.management.base import BaseCommand, CommandError

from portal.enrolment.agent_dist import AgentDistError, agent_dist_prepare


class Command(BaseCommand):
    help = (
        "Prepare /agent/'s files in AGENT_DIST_DIR: the agent's wheel from agents/ and its dependency's wheel "
        "(every start of manage.py serve and run does this too). Fails naming a wheel it could not fetch."
    )

    def handle(self, *args, **options):
        try:
            manifest = agent_dist_prepare()
        except AgentDistError as error:
            raise CommandError(str(error)) from None
        for entry in manifest["files"]:
            self.stdout.write(f"/agent/{entry['name']} sha256={entry['sha256']}")
        if manifest["missing"]:
            raise CommandError(f"missing from /agent/: {', '.join(manifest['missing'])} (pip could not fetch it)")
