"""The transition history is append-only, enforced by the database itself.

PostgreSQL: a BEFORE UPDATE OR DELETE row trigger raises. SQLite (make run): equivalent triggers.
TRUNCATE stays possible for administrators (and test-database flushes); no application path uses it.
"""

from django.db import migrations

PG_UP = """
CREATE OR REPLACE FUNCTION workflow_transition_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'workflow_transition is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER workflow_transition_append_only
    BEFORE UPDATE OR DELETE ON workflow_transition
    FOR EACH ROW EXECUTE FUNCTION workflow_transition_append_only();
"""
PG_DOWN = """
DROP TRIGGER IF EXISTS workflow_transition_append_only ON workflow_transition;
DROP FUNCTION IF EXISTS workflow_transition_append_only();
"""
SQLITE_UP = [
    """CREATE TRIGGER workflow_transition_no_update BEFORE UPDATE ON workflow_transition
       BEGIN SELECT RAISE(ABORT, 'workflow_transition is append-only: UPDATE refused'); END;""",
    """CREATE TRIGGER workflow_transition_no_delete BEFORE DELETE ON workflow_transition
       BEGIN SELECT RAISE(ABORT, 'workflow_transition is append-only: DELETE refused'); END;""",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS workflow_transition_no_update;",
    "DROP TRIGGER IF EXISTS workflow_transition_no_delete;",
]


def forwards(apps, schema_editor):
    statements = [PG_UP] if schema_editor.connection.vendor == "postgresql" else SQLITE_UP
    for sql in statements:
        schema_editor.execute(sql, params=None)


def backwards(apps, schema_editor):
    statements = [PG_DOWN] if schema_editor.connection.vendor == "postgresql" else SQLITE_DOWN
    for sql in statements:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [("workflow", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
