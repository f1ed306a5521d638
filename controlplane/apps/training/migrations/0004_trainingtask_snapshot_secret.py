import secrets

from django.db import migrations, models

import controlplane.apps.training.models


def _one_secret_per_task(apps, schema_editor):  # type: ignore[no-untyped-def]
    """AddField evaluates the default once for every existing row: give each task its own key."""
    task_model = apps.get_model("training", "TrainingTask")
    for pk in task_model.objects.values_list("pk", flat=True):
        task_model.objects.filter(pk=pk).update(snapshot_secret=secrets.token_hex(32))


class Migration(migrations.Migration):
    dependencies = [
        ("training", "0003_parallel_config_and_rank_finished"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingtask",
            name="snapshot_secret",
            field=models.CharField(
                default=controlplane.apps.training.models.new_snapshot_secret,
                editable=False,
                help_text="Key of the task's snapshot transfers between agents (HMAC); sent only in its commands.",
                max_length=64,
            ),
        ),
        migrations.RunPython(_one_secret_per_task, migrations.RunPython.noop),
    ]
