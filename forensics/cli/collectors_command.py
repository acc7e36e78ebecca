"""``gpuforensics collectors``: what capture runs, in order, and the settings it accepts."""

from __future__ import annotations

import re

import click

__all__ = ["collectors"]

_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def _plain(doc: str | None, name: str) -> str:
    """A docstring's first line as plain text: no ``literal`` or :role:`x` markup, and no
    leading repeat of the collector's name."""
    line = (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""
    line = _RST_ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], line).replace("``", "")
    return line[len(name) + 2:] if line.startswith(f"{name}: ") else line


@click.command()
@click.option("--settings", "show_settings", is_flag=True,
              help="List the settings `capture --set KEY=VALUE` accepts instead.")
def collectors(show_settings: bool) -> None:
    """List the collectors capture runs, in order, with their deadlines.

    \b
    Example:
      gpuforensics collectors
      gpuforensics collectors --settings
    """
    if show_settings:
        from forensics.capture import SETTINGS

        for key, setting in sorted(SETTINGS.items()):
            click.echo(f"{key:<28} {setting.kind:<18} {setting.help}")
        return
    from forensics.capture import load_collectors

    for c in load_collectors():
        click.echo(f"{c.name:<16} order {c.order:<4} timeout {c.timeout_s:g} s  {_plain(type(c).__doc__, c.name)}")
