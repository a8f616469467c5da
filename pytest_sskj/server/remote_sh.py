"""The POSIX sh programs the ``ssh`` launcher runs on a node (fed on stdin to ``ssh node sh -s``).

Everything the launcher does remotely is one of these scripts, so nothing of it (environment values
above all) appears on a command line or in a process listing.  A rank lives in a private *state
directory* on its node: ``pid`` (the rank's PID = PGID = SID, it runs under ``setsid``), ``out.log``
(its stdout and stderr) and ``rc`` (its exit status, once it has exited).  :func:`bootstrap_script`
starts a rank and streams its log; :func:`resume_script` re-attaches to the log after a lost connection;
:func:`pids_script` lists the rank's process tree (its session plus every descendant);
:func:`terminate_script` SIGTERMs, waits, SIGKILLs and reports survivors; :func:`state_script` reads
the state directory.  Lines the scripts print themselves start with ``[sskj] node=N rank=R``.
Remote requirements: ``sh``, ``setsid`` (util-linux), GNU ``tail`` (``--pid``), ``ps``, ``awk``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from pytest_sskj.errors import LauncherError
from pytest_sskj.report.redact import redact_argv
from pytest_sskj.server.spec import NodeCommand

__all__ = ["bootstrap_script", "pids_script", "resume_script", "state_script", "terminate_script"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# every PID of the session the rank leads (SID = $1) plus every descendant of those processes
# (a child that called setsid itself is still found through its parent)
_TREE_FN = r"""
tree() {
  ps -e -o pid= -o ppid= -o sid= 2>/dev/null | awk -v s="$1" '
    { p[NR] = $1; pp[NR] = $2; sd[NR] = $3 }
    END {
      for (i = 1; i <= NR; i++) if (sd[i] == s) t[p[i]] = 1
      do { ch = 0; for (i = 1; i <= NR; i++) if (!(p[i] in t) && (pp[i] in t)) { t[p[i]] = 1; ch = 1 } } while (ch)
      for (k in t) print k
    }'
}
"""


def _tag(node: str, rank: int) -> str:
    return f"[sskj] node={node} rank={rank}"


def bootstrap_script(cmd: NodeCommand, state_dir: str, *, banner_argv: Sequence[str] | None = None) -> str:
    """Start ``cmd`` in its own session on the node and stream its log; exit with its exit status.

    Environment values are ``export``-ed inside the script (never on a command line).  Output: a
    one-line banner with the PID and the (redacted) command, the log from its first byte, and a closing
    line with the exit status.  A lost connection does not stop the script: it still records ``rc``.
    """
    lines = [
        "set -u",
        f"d={shlex.quote(state_dir)}",
        'mkdir -p -m 700 "$d" || { echo "[sskj] cannot create $d on $(hostname)" >&2; exit 97; }',
        'rm -f "$d/rc" "$d/pid"',
        ': > "$d/out.log"',
    ]
    for name, value in cmd.env:
        if not _ENV_NAME.match(name):
            raise LauncherError(
                f"environment name {name!r} of node {cmd.node} is not a shell identifier; "
                "use NAME=VALUE with letters, digits and underscores"
            )
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append("export PYTHONUNBUFFERED=${PYTHONUNBUFFERED:-1}")
    shown = shlex.join(redact_argv(banner_argv if banner_argv is not None else cmd.argv))
    tag = _tag(cmd.node, cmd.rank)
    lines += [
        f'setsid {shlex.join(cmd.argv)} </dev/null >>"$d/out.log" 2>&1 &',
        "pid=$!",
        'echo "$pid" > "$d/pid"',
        "trap '' HUP PIPE",  # a dropped connection must not stop this script from recording the exit status
        # one line whatever the argv holds (a -c program with newlines): the stream offset counts log bytes only
        f"printf '%s\\n' {shlex.quote(tag + ' pid=')}\"$pid\"' started on '"
        f'"$(hostname)"{shlex.quote(": " + shown.replace(chr(10), chr(92) + "n"))}',
        'tail -n +1 -s 0.2 -F --pid="$pid" "$d/out.log" 2>/dev/null &',
        "tp=$!",
        'wait "$pid"',
        "rc=$?",
        'echo "$rc" > "$d/rc"',
        'wait "$tp"',
        f'echo "{tag} pid=$pid exited with status $rc"',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def resume_script(node: str, rank: int, state_dir: str, offset: int) -> str:
    """Stream ``out.log`` again from byte ``offset`` until the rank exits; exit with its recorded status."""
    tag = _tag(node, rank)
    return f"""d={shlex.quote(state_dir)}
pid=$(cat "$d/pid") || exit 255
echo "{tag} stream resumed at byte {offset} after a lost connection"
tail -c +{offset + 1} -s 0.2 -F --pid="$pid" "$d/out.log" 2>/dev/null
i=0; while [ ! -s "$d/rc" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
rc=$(cat "$d/rc" 2>/dev/null) || rc=255
echo "{tag} pid=$pid exited with status $rc"
exit "$rc"
"""


def pids_script(state_dir: str) -> str:
    """Print the PIDs of the rank's live tree, one per line (nothing once it is gone)."""
    return _TREE_FN + f'pid=$(cat {shlex.quote(state_dir)}/pid 2>/dev/null) || exit 0\ntree "$pid"\n'


def terminate_script(state_dir: str, timeout_s: float) -> str:
    """SIGTERM the whole tree, wait ``timeout_s``, SIGKILL survivors, wait 5 s; print ``left: <pids>``."""
    return (
        _TREE_FN
        + f"""
d={shlex.quote(state_dir)}
pid=$(cat "$d/pid" 2>/dev/null) || {{ echo "left:"; exit 0; }}
t=$(tree "$pid"); [ -n "$t" ] && kill -TERM $t 2>/dev/null
i=0; n={max(1, int(timeout_s * 10))}
while [ -n "$(tree "$pid")" ] && [ $i -lt $n ]; do sleep 0.1; i=$((i + 1)); done
t=$(tree "$pid"); [ -n "$t" ] && kill -KILL $t 2>/dev/null
i=0; while [ -n "$(tree "$pid")" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
echo "left:" $(tree "$pid")
"""
    )


def state_script(state_dir: str) -> str:
    """Print ``pid=``, ``rc=`` and (while the rank runs) ``alive=1``."""
    d = shlex.quote(state_dir)
    return (
        f'echo "pid=$(cat {d}/pid 2>/dev/null)"\necho "rc=$(cat {d}/rc 2>/dev/null)"\n'
        f'p=$(cat {d}/pid 2>/dev/null) && kill -0 "$p" 2>/dev/null && echo alive=1\n'
    )
