from django.core.management.base import BaseCommand, CommandError

from portal.enrolment.agent_dist import AgentDistError, agent_wheel_build, dependency_wheels_fetch


class Command(BaseCommand):
    help = "Build the agent's wheel from agents/ and fetch its dependency's wheel, for /agent/ to serve."

    def handle(self, *args, **options):
        try:
            wheel = agent_wheel_build()
            dependencies = dependency_wheels_fetch()
        except AgentDistError as error:
            raise CommandError(str(error)) from None
        for path in [wheel, *dependencies]:
            self.stdout.write(f"/agent/{path.name}")
