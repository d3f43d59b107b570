"""`cockpit serve RUN`: the run view of `cockpit attach`, in a browser, through textual-serve.

It listens on 127.0.0.1 (the browser comes through `ssh -L`, whose line it prints) with a random
token in the URL; every browser tab gets its own `cockpit attach RUN --read-only` (`--control`: without
--read-only). textual-serve is the `serve` extra, imported only here, only when the command runs.
"""

from __future__ import annotations

import argparse
import getpass
import importlib.util
import ipaddress
import os
import secrets
import socket
import sys

from cockpit import paths
from cockpit.run import rundir
from cockpit.run.exit_codes import EXIT_FAILED, EXIT_USAGE

TOKEN_BYTES = 24  # 32 characters of the URL-safe alphabet: 192 bits


def missing_package() -> str | None:
    """Why `serve` cannot run here, with the line that installs what it needs; None when it can."""
    if importlib.util.find_spec("textual_serve") is not None:
        return None
    return (
        "cockpit serve needs textual-serve, which is not installed in this environment "
        f"({sys.executable}). Install the serve extra: {sys.executable} -m pip install "
        "'lora-cockpit[serve]' (or just textual-serve: pip install textual-serve)"
    )


def tunnel_line(port: int, environ: dict[str, str] | None = None) -> str:
    """The `ssh -L` line that brings this machine's 127.0.0.1:port to the same port of the user's
    own: its user and address from the SSH session this runs in (SSH_CONNECTION), else this
    machine's name."""
    environ = dict(os.environ) if environ is None else environ
    words = (environ.get("SSH_CONNECTION") or "").split()
    host, ssh_port = (words[2], words[3]) if len(words) == 4 else (socket.gethostname(), "22")
    user = environ.get("USER") or getpass.getuser()
    port_flag = "" if ssh_port == "22" else f" -p {ssh_port}"
    return f"ssh -N -L {port}:127.0.0.1:{port}{port_flag} {user}@{host}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def start_lines(run_id: str, host: str, port: int, token: str, control: bool) -> list[str]:
    """What `serve` says before it listens: where, the tunnel, the URL with its token, who may do what."""
    url = f"http://127.0.0.1:{port}/?token={token}"
    mode = (
        "with --control: the browser can save, pause, resume, stop and export"
        if control
        else "read-only: the browser's save, pause, stop and export are refused; --control allows them"
    )
    lines = [f"serving run {run_id} on {host}:{port}, {mode}"]
    if is_loopback(host):
        lines += [
            "from your own machine, open a tunnel (it listens there on 127.0.0.1 alone):",
            f"  {tunnel_line(port)}",
            "then open (the token is asked for on every request):",
            f"  {url}",
        ]
    else:
        lines += [
            f"warning: {host} is not a loopback address: anyone who can reach it and has the token can "
            f"watch{' and control' if control else ''} the run, over plain HTTP (the token travels "
            f"unencrypted). Prefer the default, {paths.cockpit_command()} serve without --host, and ssh -L.",
            f"  {url.replace('127.0.0.1', host)}",
        ]
    lines.append("each browser tab runs its own view; Ctrl+C stops serving (the run goes on)")
    return lines


def cmd_serve(args: argparse.Namespace) -> int:
    missing = missing_package()
    if missing is not None:
        print(missing, file=sys.stderr)
        return EXIT_USAGE
    run = rundir.find(args.run)
    from cockpit.live.web import TokenServer, attach_command

    token = secrets.token_urlsafe(TOKEN_BYTES)
    command = attach_command(run.path, control=args.control)
    server = TokenServer(command, args.host, args.port, token, title=f"lora-cockpit {run.run_id}")
    for line in start_lines(run.run_id, args.host, args.port, token, args.control):
        print(line, flush=True)
    try:
        server.serve()
    except OSError as exc:  # the port is taken, or the address is not this machine's
        print(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}. "
            f"Give another port: {paths.cockpit_command()} serve {run.run_id} --port {args.port + 1}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return 0
