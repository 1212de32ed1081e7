"""A ``workbench`` command that pays its imports once: this script imports the command line (and what
``workbench run`` imports first), then forks a child per command it is sent; each child redirects its
output to the files named and runs ``sys.exit(workbench.cli.main(argv))``, as the ``workbench`` script
does. So every command still runs in a process of its own (no state of an earlier command in it,
its own client, its exit handlers run as they do at a command's end), without a new interpreter and
its seconds of imports each time (``cluster_helpers.Commands`` drives it).

Protocol, one JSON document per line: it answers ``{"names": [...]}`` (the applications this fresh
interpreter registers: the built-in ones) when it starts; then it reads
``{"argv": [...], "stdout": PATH, "stderr": PATH}`` on stdin and answers ``{"status": N}`` (the child's
exit status, negative for a signal) once the child has exited.
"""

from __future__ import annotations

import json
import os
import sys
import threading

if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # the tests' folder, which a ``workbench`` command does not import from

import workbench.cli  # noqa: E402
import workbench.lab.runner  # noqa: E402, F401  (imported by ``workbench run`` before anything else)
from workbench.apps import registry  # noqa: E402


def _answer(document: dict) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def _child(request: dict) -> None:
    """In the forked child: output to the files named, no stdin, then the command as the script runs it."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.exit(workbench.cli.main(request["argv"]))


def serve() -> None:
    """Answer the built-in applications, then fork a child per command read from stdin until it closes."""
    _answer({"names": registry.names()})
    for line in sys.stdin:
        request = json.loads(line)
        if threading.active_count() != 1:  # a fork copies only the calling thread: a child would lack the others
            raise RuntimeError(f"threads running before a fork: {[t.name for t in threading.enumerate()]}")
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns: SystemExit (or the command's exception) ends the child
        _, status = os.waitpid(pid, 0)
        _answer({"status": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
