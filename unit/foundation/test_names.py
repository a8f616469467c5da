"""Nothing reads or writes outside its own folders (issue 53): one name rule for every identifier that becomes a
path (pytest_sskj/names.py), checked at parse time by every subcommand and option that takes one, and every path it
names checked to stay inside its root after symlinks are followed.

Before: ``export --run /etc`` wrote ``/etc/export/``; ``report summary``/``export`` with ``..`` in the run id left
the reports dir; a 300-character run id crashed with "file name too long"; ``serve start ../x`` raised a traceback.
The property test below generates hostile identifiers (and links that lead out of the root) for every subcommand
that takes one, and proves: a refusal with an exit status (never a traceback), nothing written outside the root,
every call bounded in time."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_sskj.__main__ import main
from pytest_sskj.names import MAX_NAME, NameRefused, check_name, inside
from unit.foundation.test_files import bounded

ROOT = Path(__file__).resolve().parents[2]

VALID = ["ci-unit", "kimi3-ab", "v1.0+cpu", "_private", "20261207-061043-0895", "flashinfer_mxfp4", "a" * MAX_NAME]
HOSTILE = [
    "", ".", "..", "../x", "../../etc", "/etc", "a/b", "a\\b", "-rf", "--run", ".hidden", "+x", "a" * (MAX_NAME + 1),
    "a" * 300, "a\x00b", "a\nb", "$(id)", "`id`", "a;b", "a b", "~root", "ä", "x:y", "*", "a|b", "'q'",
]  # fmt: skip


@pytest.mark.parametrize("name", VALID)
def test_a_name_of_the_documented_set_is_accepted(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", HOSTILE)
def test_every_other_identifier_is_refused_in_one_line_saying_what_is_accepted(name: str) -> None:
    with pytest.raises(NameRefused) as exc:
        check_name(name, "run id")
    text = str(exc.value)
    assert "\n" not in text.replace(repr(name), ""), f"expected one line, got {text!r}"
    assert "run id" in text and "letters, digits" in text, f"expected what and what is accepted: {text!r}"


def test_a_path_that_a_symlink_leads_out_of_its_root_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "reports", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "linked").symlink_to(outside)
    (root / "loop").symlink_to(root / "loop")
    (root / "inner").symlink_to(root / "real")
    assert inside(root, "inner") == root / "inner", "expected a link that stays inside its root accepted"
    assert inside(root, "missing", ".json") == root / "missing.json"
    with pytest.raises(NameRefused, match="leads outside"):
        inside(root, "linked")
    with pytest.raises(NameRefused, match=r"cannot be resolved|leads outside"):
        inside(root, "loop")


# -- every subcommand that takes an identifier, with hostile ones ---------------------------------------------------
COMMANDS = [
    ("export", "--run", "{}"),
    ("report", "summary", "--run", "{}"),
    ("release", "show", "{}"),
    ("release", "mark", "--tag", "{}", "--scope", "cpu"),
    ("release", "mark", "--run", "{}", "--tag", "t1", "--scope", "cpu"),
    ("compare", "{}", "ci-unit"),
    ("compare", "ci-unit", "{}"),
    ("serve", "start", "{}"),
    ("serve", "status", "{}"),
    ("serve", "stop", "{}"),
]


def _call(argv: list[str]) -> tuple[int, str]:
    """``python -m pytest_sskj ARGV`` in this process: its exit status and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's refusal at parse time
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue()


def _listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.fixture
def rooted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A working directory whose reports dir holds a link out to ``outside`` (a run, a release mark, a deployment)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "reports" / "releases").mkdir(parents=True)
    (root / "reports" / "deployments").mkdir()
    outside.mkdir()
    (outside / "manifest.json").write_text("{}")
    (outside / "points").mkdir()
    (root / "reports" / "escape").symlink_to(outside)
    (root / "reports" / "releases" / "escape.json").symlink_to(outside / "manifest.json")
    (root / "reports" / "deployments" / "escape.json").symlink_to(outside / "manifest.json")
    shutil.copy(ROOT / "release.toml", root / "release.toml")
    monkeypatch.chdir(root)
    monkeypatch.setenv("SSKJ_REPORTS_DIR", str(root / "reports"))
    return root, outside


@pytest.mark.parametrize("template", COMMANDS, ids=lambda t: " ".join(t))
@pytest.mark.parametrize("hostile", ["escape", "{outside}", "../outside", "a" * 300, "$(touch pwned)", "-rf"])
def test_each_subcommand_refuses_a_name_that_leads_out_of_its_root(
    rooted: tuple[Path, Path], template: tuple[str, ...], hostile: str
) -> None:
    _refused_and_nothing_written_outside(rooted, template, hostile)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    template=st.sampled_from(COMMANDS),
    hostile=st.one_of(
        st.sampled_from([*HOSTILE, "escape", "{outside}", "{outside}/x", "../outside", "../../outside"]),
        st.text(min_size=1, max_size=300).filter(lambda t: not _valid(t) and "\x00" not in t),
    ),
)
def test_a_hostile_identifier_is_refused_by_every_subcommand_and_nothing_is_written_outside(
    rooted: tuple[Path, Path], template: tuple[str, ...], hostile: str
) -> None:
    _refused_and_nothing_written_outside(rooted, template, hostile)


def _refused_and_nothing_written_outside(rooted: tuple[Path, Path], template: tuple[str, ...], hostile: str) -> None:
    root, outside = rooted
    value = hostile.replace("{outside}", str(outside))
    before_out, before_parent = _listing(outside), sorted(p.name for p in root.parent.iterdir())
    argv = [value if part == "{}" else part for part in template]
    code, text = bounded(_call, argv, limit_s=20.0)
    if code == 0 and template[:2] == ("serve", "start"):  # a deployment it should not have started: stop it
        for state in (root / "reports" / "deployments").glob("*.json"):
            if not state.is_symlink():
                _call(["serve", "stop", state.stem])
    assert code != 0, f"expected {argv} refused, it exited 0:\n{text[-1500:]}"
    assert "Traceback" not in text, f"expected a one-line refusal of {argv}, got a traceback:\n{text[-3000:]}"
    assert _listing(outside) == before_out, f"{argv} wrote outside its root: {_listing(outside)}"
    assert sorted(p.name for p in root.parent.iterdir()) == before_parent, f"{argv} wrote beside its root"


def _valid(text: str) -> bool:
    try:
        check_name(text)
    except NameRefused:
        return False
    return True


def test_run_ids_and_backend_names_given_to_a_run_obey_the_same_rule(pytester: pytest.Pytester) -> None:
    """``--run-id``, ``--resume``, ``--sskj-deployment`` and ``--backend`` (whose names become point ids, i.e. file
    names) refuse at parse time."""
    for args, shown in (
        (["--run-id", "a" * 300], "*--run-id*characters long*letters, digits*"),
        (["--run-id", "$(id)"], "*--run-id*is not accepted*"),
        (["--backend", "..,marlin"], "*--backend*'..' is not accepted*"),
        (["--resume", "/etc"], "*--resume*'/etc' is not accepted*"),
        (["--sskj-deployment", "../x"], "*--sskj-deployment*'../x' is not accepted*"),
    ):
        result = pytester.runpytest("--co", "-p", "no:cacheprovider", *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, f"expected {args} refused at parse time"
        result.stderr.fnmatch_lines([shown])
    assert not (pytester.path / "reports").exists() or not any(
        p.name.startswith("a" * 10) for p in (pytester.path / "reports").iterdir()
    )


def test_a_run_id_whose_folder_links_out_of_the_reports_dir_is_refused(pytester: pytest.Pytester) -> None:
    outside = pytester.path.parent / f"{pytester.path.name}-outside"
    outside.mkdir()
    (pytester.path / "reports").mkdir()
    (pytester.path / "reports" / "linked").symlink_to(outside)
    result = pytester.runpytest("--co", "-p", "no:cacheprovider", "--run-id", "linked")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, "expected a run dir that links outside refused"
    result.stderr.fnmatch_lines(["*--run-id: run id 'linked' leads outside*"])
    assert os.listdir(outside) == []


# -- item 4: the same rules on every node ----------------------------------------------------------------------------
_DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


@settings(max_examples=200, deadline=None)
@given(
    name=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}", fullmatch=True),
    node=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10}){0,2}", fullmatch=True),
    rank=st.integers(0, 511),
)
def test_names_that_reach_a_node_become_container_names_and_state_folders_that_stay_confined(
    name: str, node: str, rank: int
) -> None:
    """A deployment name or run id (any name the rule accepts, '+' and '.' included) and a node's host name
    become a container name the runtime accepts (docker: [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 128) and a rank's
    state folder one level below the launcher's own token folder -- never a path out of it."""
    from pytest_sskj.server.container import container_name
    from pytest_sskj.server.ssh import _safe
    from pytest_sskj.spec import NodeCommand

    assert check_name(name) == name
    cname = container_name(f"serve-{name}", NodeCommand(node=node, rank=rank, argv=("x",)))
    assert _DOCKER_NAME.fullmatch(cname) and len(cname) <= 128, cname
    twin = name.replace("+", "-") if "+" in name else name.replace("-", "+", 1) if "-" in name[1:] else None
    if twin and twin != name:  # a+b and a-b are two deployments: two containers
        other = container_name(f"serve-{twin}", NodeCommand(node=node, rank=rank, argv=("x",)))
        assert other != cname, f"{name!r} and {twin!r} share the container name {cname!r}"
    folder = f"{_safe(node)}-rank{rank}-1"
    assert "/" not in folder and folder not in (".", "..") and not folder.startswith("-"), folder
    root = "/tmp/sskj-20261207-000000-abcdef"
    assert os.path.normpath(f"{root}/{folder}").startswith(root + "/"), folder
