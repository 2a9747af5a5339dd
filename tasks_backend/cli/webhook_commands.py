"""`tasks-backend webhook-secret [--rotate]`: the caller's webhook signing secret, over the server's HTTP API.

Like the other client commands (`client_commands`): `--url`/`--token` or their environment variables. The secret
alone goes to stdout (so `SECRET=$(tasks-backend webhook-secret)` works); notes go to stderr.
"""

from __future__ import annotations

import click

from tasks_backend.client import Client

from .client_commands import _err, server_options


@click.command("webhook-secret")
@click.option("--rotate", is_flag=True, help="make a new secret; the old one keeps signing for --grace seconds")
@click.option("--grace", type=click.IntRange(0, 7 * 24 * 3600), default=None,
              help="with --rotate: seconds the old secret still signs (default 86400; 0: stop at once)")
@server_options
def webhook_secret(client: Client, rotate: bool, grace: int | None) -> None:
    """Print your webhook signing secret (made on first use); --rotate replaces it."""
    if grace is not None and not rotate:
        raise click.UsageError("--grace goes with --rotate.")
    answer = client.rotate_webhook_secret(grace) if rotate else client.webhook_secret()
    click.echo(answer["secret"])
    if answer.get("previousValidUntil"):
        _err().print(f"the previous secret also signs until {answer['previousValidUntil']}")
