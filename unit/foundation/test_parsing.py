"""Option value parsers: sizes, lists, node ranges, inventory files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.parsing import (
    expand_nodes,
    parse_bool,
    parse_int_list,
    parse_name_list,
    parse_size,
    parse_size_list,
)


@pytest.mark.parametrize(
    ("text", "expected"), [("4096", 4096), ("8K", 8192), ("16k", 16384), (" 1 ", 1), ("2M", 2 << 20)]
)
def test_parse_size_accepts_suffixes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "8KB", "abc", "", "1.5K"])
def test_parse_size_rejects_bad_values(text: str) -> None:
    with pytest.raises(ValueError, match=r"size|at least"):
        parse_size(text)


def test_size_list_keeps_order_and_refuses_duplicates() -> None:
    assert parse_size_list("4096,8K,16k") == (4096, 8192, 16384)
    with pytest.raises(ValueError, match="twice"):
        parse_size_list("8K,8192")


def test_int_list_refuses_negative_and_zero() -> None:
    assert parse_int_list("8,16") == (8, 16)
    with pytest.raises(ValueError, match="at least 1"):
        parse_int_list("8,-1")
    with pytest.raises(ValueError, match="at least 1"):
        parse_int_list("0")


def test_name_list_refuses_odd_characters() -> None:
    assert parse_name_list("marlin,flashinfer_mxfp4") == ("marlin", "flashinfer_mxfp4")
    with pytest.raises(ValueError, match=r"name .marlin;rm. is not accepted"):
        parse_name_list("marlin;rm")


@pytest.mark.parametrize(
    ("text", "template", "expected"),
    [
        ("601-604", "{}", ("601", "602", "603", "604")),
        ("601,603", "{}", ("601", "603")),
        ("601,603", "gpu{}", ("gpu601", "gpu603")),
        ("gpu601-gpu603", "{}", ("gpu601", "gpu602", "gpu603")),
        ("node-a,node-b.lan", "{}", ("node-a", "node-b.lan")),
        ("007-009", "{}", ("007", "008", "009")),
    ],
)
def test_expand_nodes_forms(text: str, template: str, expected: tuple[str, ...]) -> None:
    assert expand_nodes(text, template=template) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("604-601", "runs backwards"),
        ("601,601", "more than once"),
        ("gpu601-cpu603", "mixes prefixes"),
        ("bad host!", "neither a node number"),
        ("", "empty"),
    ],
)
def test_expand_nodes_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_nodes(text)


def test_expand_nodes_reads_inventory_files(tmp_path: Path) -> None:
    inv = tmp_path / "inv.toml"
    inv.write_text('nodes = ["601", {host = "602.lan"}]\n')
    assert expand_nodes("@inv.toml", base_dir=tmp_path) == ("601", "602.lan")
    with pytest.raises(ValueError, match="does not exist"):
        expand_nodes("@missing.toml", base_dir=tmp_path)
    (tmp_path / "bad.toml").write_text("nodes = 3\n")
    with pytest.raises(ValueError, match="non-empty list"):
        expand_nodes("@bad.toml", base_dir=tmp_path)


def test_template_must_have_placeholder() -> None:
    with pytest.raises(ValueError, match="must contain"):
        expand_nodes("601", template="gpu")


@pytest.mark.parametrize(("text", "value"), [("1", True), ("yes", True), ("off", False), ("0", False)])
def test_parse_bool(text: str, value: bool) -> None:
    assert parse_bool(text) is value
