"""docs/configuration.md, made from the settings object itself."""

from __future__ import annotations

from app.settings import Settings

__all__ = ["configuration_markdown"]


def configuration_markdown() -> str:
    """docs/configuration.md: every setting with its default and meaning, made from the
    settings object itself (`offhook settings --markdown`), so it cannot drift."""
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable, read once at start-up by `offhook serve`,",
        "`offhook worker` and the CLI. `offhook settings` lists them with their current",
        "values (secrets masked). This page is generated from the settings object",
        "(`app/settings.py`) by `offhook settings --markdown > docs/configuration.md`; a test",
        "fails when it is out of date.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    for env, default, meaning in Settings.describe():
        shown = f"`{default}`" if default != "" else "(empty)"
        lines.append(f"| `{env}` | {shown} | {meaning.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
