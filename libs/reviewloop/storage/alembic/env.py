"""The one Alembic environment every service shares; ``migrate()`` hands it the connection."""

from alembic import context

config = context.config
connection = config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=config.attributes["target_metadata"],
    render_as_batch=True,  # SQLite alters tables by copy
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
