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
from pytest_sskj.redact import is_secret_flag, redact_argv
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


# Secret *arguments* (``--api-key V``) must not show in ``ps`` on the node, where any user can read a command
# line (``/proc/PID/cmdline``) but only the owner the environment.  The script exports each value as
# ``SSKJ_SECRET_ARG_<i>`` and starts the Python program under this wrapper with placeholders in its argv;
# the wrapper puts the values into ``sys.argv`` inside the process (and drops the variables) before it runs
# the module (``python -m M``) or the Python console script (``vllm serve``) as ``__main__``.
_SECRET_ENV = "SSKJ_SECRET_ARG_"  # noqa: S105 - a variable name prefix, not a password
_WRAPPER = (
    "import os,runpy,sys\n"
    "t,k,a=sys.argv[1],sys.argv[2],sys.argv[3:]\n"
    f"for n in [x for x in os.environ if x.startswith({_SECRET_ENV!r})]:\n"
    " v=os.environ.pop(n);a=[y.replace('@@'+n+'@@',v) for y in a]\n"
    "sys.argv=[t,*a]\n"
    "runpy.run_module(t,run_name='__main__',alter_sys=True) if k=='m' else runpy.run_path(t,run_name='__main__')\n"
)


def _hide_secret_args(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """``argv`` with every secret value replaced by a placeholder, and the ``(env name, value)`` pairs."""
    out: list[str] = []
    pairs: list[tuple[str, str]] = []

    def hide(value: str) -> str:
        name = f"{_SECRET_ENV}{len(pairs)}"
        pairs.append((name, value))
        return f"@@{name}@@"

    take_next = False
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if take_next and arg:
            out.append(hide(arg))
        elif sep and value and flag.startswith("-") and is_secret_flag(flag):
            out.append(f"{flag}={hide(value)}")
        else:
            out.append(arg)
        take_next = not take_next and not sep and is_secret_flag(arg)
    return out, pairs


def _launch_line(cmd: NodeCommand) -> list[str]:
    """The script lines that start ``cmd`` under ``setsid``; secret arguments go through the environment."""
    argv, pairs = _hide_secret_args(cmd.argv)
    redirect = '</dev/null >>"$d/out.log" 2>&1 &'
    if not pairs:
        return [f"setsid {shlex.join(cmd.argv)} {redirect}"]
    lines = [f"export {name}={shlex.quote(value)}" for name, value in pairs]
    wrapper = shlex.quote(_WRAPPER)
    if len(argv) >= 3 and argv[1] == "-m":  # python -m module ...
        return [
            *lines,
            f"setsid {shlex.quote(argv[0])} -c {wrapper} {shlex.join([argv[2], 'm', *argv[3:]])} {redirect}",
        ]
    exe = shlex.quote(argv[0])
    tag = shlex.quote(f"[sskj] node={cmd.node} rank={cmd.rank}")
    return [
        *lines,
        f"x=$(command -v {exe}) || {{ echo {tag}' cannot find '{exe} >&2; exit 127; }}",
        "ip=$(head -n 1 \"$x\" | sed -n 's/^#! *//p')",
        f"case \"$ip\" in *python*) ;; *) echo {tag}' '{exe}' is no Python program: a secret argument would show"
        f" in ps on this node; pass it through the environment (--sskj-env) instead' >&2; exit 96;; esac",
        f'setsid $ip -c {wrapper} "$x" p {shlex.join(argv[1:])} {redirect}',
    ]


def _tag(node: str, rank: int) -> str:
    return f"[sskj] node={node} rank={rank}"


def bootstrap_script(cmd: NodeCommand, state_dir: str, *, banner_argv: Sequence[str] | None = None) -> str:
    """Start ``cmd`` in its own session on the node and stream its log; exit with its exit status.

    Environment values are ``export``-ed inside the script (never on a command line), and so are secret
    arguments (``--api-key V``), which the program's Python wrapper substitutes into its own argv.  Output: a
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
        *_launch_line(cmd),
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
t=$(tree "$pid"); [ -n "$t" ] && kill -TERM $t 2>/dev/null && kill -CONT $t 2>/dev/null
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
