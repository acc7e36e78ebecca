"""Redaction of Engine API documents before they are written (uses ``ctx.redactor``).

``Config.Env``/``ContainerConfig.Env`` values except allow-listed names (``NVIDIA_*``, ``CUDA_*``,
``PATH``... see forensics/bundle/redact.py); secrets in ``Path``, ``Args``, ``Cmd``,
``Entrypoint``, in command lines dockerd joined with spaces (the list's ``Command``, top's last
column), in exec ``ProcessConfig``, in the command an ``exec_create``/``exec_start`` event's
``Action`` carries; label values (``Config.Labels``, the list's ``Labels``, events'
``Actor.Attributes``, which copy every label) under secret-looking keys or shaped like
credentials (``Redactor.label_map``), as are the log driver's options (``HostConfig.LogConfig.Config``:
``--log-opt splunk-token=...``); proxy credentials in ``/info``. Values are replaced in place
by the capture's keyed pseudonyms; everything else is left as the engine returned it.
"""

from __future__ import annotations

from typing import Any

from forensics.bundle.redact import Redactor
from forensics.collect.context import CollectContext

__all__ = ["ENV_PATHS", "redact_command", "redact_container", "redact_create_command", "redact_events",
           "redact_exec", "redact_info", "redact_libpod", "redact_listing", "redact_oci_config", "redact_top"]

ENV_PATHS = (("Config", "Env"), ("ContainerConfig", "Env"))


def redact_container(doc: dict[str, Any], ctx: CollectContext) -> dict[str, Any]:
    r = ctx.redactor
    r.json_env_lists(doc, *ENV_PATHS)
    if isinstance(doc.get("Args"), list):
        doc["Args"] = r.argv([a for a in doc["Args"] if isinstance(a, str)])
    if isinstance(doc.get("Path"), str):
        doc["Path"] = r.text(doc["Path"], "argv")
    for section in ("Config", "ContainerConfig"):
        conf = doc.get(section)
        if isinstance(conf, dict):
            r.label_map(conf.get("Labels"))
            for key in ("Cmd", "Entrypoint"):
                if isinstance(conf.get(key), list):
                    conf[key] = r.argv([a for a in conf[key] if isinstance(a, str)])
            health = conf.get("Healthcheck")
            if isinstance(health, dict) and isinstance(health.get("Test"), list):
                health["Test"] = r.argv([a for a in health["Test"] if isinstance(a, str)])
    host = doc.get("HostConfig")
    log = host.get("LogConfig") if isinstance(host, dict) else None
    if isinstance(log, dict):  # --log-opt: splunk-token, a Loki URL with its key, ...
        r.label_map(log.get("Config"), "log-opts")
    _redact_state_text(doc.get("State"), r)
    return doc


def _redact_state_text(state: Any, r: Redactor) -> None:
    """``State.Error`` and the health checks' output (``State.Health.Log[].Output``): free text a
    container's command wrote, redacted as its log is."""
    if not isinstance(state, dict):
        return
    if isinstance(state.get("Error"), str) and state["Error"]:
        state["Error"] = r.text(state["Error"], "logs")
    health = state.get("Health")
    for entry in health.get("Log") or () if isinstance(health, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("Output"), str):
            entry["Output"] = r.text(entry["Output"], "logs")


_ENV_FLAGS = ("-e", "--env")


def redact_create_command(argv: list[str], ctx: CollectContext) -> list[str]:
    """Podman's ``Config.CreateCommand`` (the ``podman run``/``create`` command line): the value of
    ``-e``/``--env NAME=value`` as a container environment's (allow-listed names kept), every other
    argument as a command line's."""
    r = ctx.redactor
    out: list[str] = []
    env_next = False
    for arg in argv:
        if env_next:
            out.append((r.env_list([arg]) or [arg])[0])
            env_next = False
        elif arg in _ENV_FLAGS:
            out.append(arg)
            env_next = True
        elif arg.startswith("--env="):
            out.append("--env=" + (r.env_list([arg[len("--env="):]]) or [""])[0])
        else:
            out.append(arg)
    return r.argv(out)  # the rest as a command line (a pseudonym is left as it is)


def redact_libpod(doc: dict[str, Any], ctx: CollectContext) -> dict[str, Any]:
    """Podman's own inspect (``GET /libpod/containers/{id}/json``) as a Docker inspect is redacted,
    and its own fields: ``Config.CreateCommand``, ``Config.Annotations`` (as labels), a string
    ``Config.Entrypoint``."""
    redact_container(doc, ctx)
    conf = doc.get("Config")
    if isinstance(conf, dict):
        if isinstance(conf.get("CreateCommand"), list):
            conf["CreateCommand"] = redact_create_command(
                [a for a in conf["CreateCommand"] if isinstance(a, str)], ctx)
        ctx.redactor.label_map(conf.get("Annotations"))
        if isinstance(conf.get("Entrypoint"), str):
            conf["Entrypoint"] = ctx.redactor.text(conf["Entrypoint"], "argv")
    return doc


def redact_oci_config(spec: dict[str, Any], ctx: CollectContext) -> dict[str, Any]:
    """An OCI runtime spec (``config.json``): the process's and hooks' env as environments, their
    args as command lines, annotations as labels."""
    r = ctx.redactor
    process = spec.get("process")
    if isinstance(process, dict):
        r.json_env_lists(process, ("env",))
        if isinstance(process.get("args"), list):
            process["args"] = r.argv([a for a in process["args"] if isinstance(a, str)])
    hooks = spec.get("hooks")
    for stage in hooks.values() if isinstance(hooks, dict) else ():
        for hook in stage if isinstance(stage, list) else ():
            if isinstance(hook, dict):
                r.json_env_lists(hook, ("env",))
                if isinstance(hook.get("args"), list):
                    hook["args"] = r.argv([a for a in hook["args"] if isinstance(a, str)])
    r.label_map(spec.get("annotations"))
    return spec


def redact_top(doc: dict[str, Any], ctx: CollectContext) -> dict[str, Any]:
    titles = doc.get("Titles")
    rows = doc.get("Processes")
    if isinstance(titles, list) and isinstance(rows, list) and titles and ctx.redactor.enabled:
        last = len(titles) - 1
        for row in rows:
            if isinstance(row, list) and len(row) > last and isinstance(row[last], str):
                row[last] = redact_command(row[last], ctx)
    return doc


def redact_command(command: str, ctx: CollectContext) -> str:
    """A command line that dockerd joined with spaces (list ``Command``, top's last column)."""
    if not ctx.redactor.enabled:
        return command
    # argv word by word, then the joined line as text: "Bearer <token>" and a PEM block span words
    return ctx.redactor.text(" ".join(ctx.redactor.argv(command.split(" "))), "argv")


def redact_listing(listing: list[Any], ctx: CollectContext) -> list[Any]:
    for item in listing:
        if isinstance(item, dict):
            if isinstance(item.get("Command"), str):
                item["Command"] = redact_command(item["Command"], ctx)
            ctx.redactor.label_map(item.get("Labels"))
    return listing


_EXEC_ACTIONS = ("exec_create: ", "exec_start: ")


def redact_events(events: list[Any], ctx: CollectContext) -> list[Any]:
    """``GET /events`` records: ``Actor.Attributes`` (every label of the container, plus ``name``,
    ``image``, ``exitCode``...) like labels; the command line after ``exec_create: ``/``exec_start: ``
    in ``Action`` (and the legacy ``status``) like argv."""
    if not ctx.redactor.enabled:
        return events
    for ev in events:
        if not isinstance(ev, dict):
            continue
        actor = ev.get("Actor")
        if isinstance(actor, dict):
            ctx.redactor.label_map(actor.get("Attributes"))
        for key in ("Action", "status"):
            value = ev.get(key)
            if isinstance(value, str) and value.startswith(_EXEC_ACTIONS):
                head, _, command = value.partition(": ")
                ev[key] = f"{head}: {redact_command(command, ctx)}"
    return events


def redact_exec(doc: dict[str, Any], ctx: CollectContext) -> dict[str, Any]:
    """``GET /exec/{id}/json``: ``ProcessConfig.entrypoint``/``arguments`` redacted like argv."""
    pc = doc.get("ProcessConfig")
    if isinstance(pc, dict):
        if isinstance(pc.get("arguments"), list):
            pc["arguments"] = ctx.redactor.argv([a for a in pc["arguments"] if isinstance(a, str)])
        if isinstance(pc.get("entrypoint"), str):
            pc["entrypoint"] = ctx.redactor.text(pc["entrypoint"], "argv")
    return doc


def redact_info(doc: dict[str, Any], ctx: CollectContext) -> dict[str, Any]:
    for key in ("HttpProxy", "HttpsProxy", "NoProxy"):
        if isinstance(doc.get(key), str):
            doc[key] = ctx.redactor.text(doc[key])
    return doc
