from django.db import migrations

ROLES = ("admin", "technician", "viewer")


def create_roles(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in ROLES:
        Group.objects.using(schema_editor.connection.alias).get_or_create(name=name)


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    # The groups' permissions are filled in after every migrate by role_permissions_sync,
    # once Django has created the permissions of every model.
    dependencies = [("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_roles, remove_roles)]
