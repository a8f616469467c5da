"""FlashInfer capability probe and skip reasons, with test doubles for the package (no GPU needed)."""

from __future__ import annotations

import enum
import subprocess
import sys
import types
from typing import Any

import pytest

from pytest_sskj.numerics import flashinfer_probe as probe


class _Act(enum.IntEnum):
    Swiglu = 3
    Situ = 10


def fake_flashinfer(*, situ_kw: bool = True, situ_enum: bool = True, var_kw: bool = False) -> types.ModuleType:
    """A stand-in ``flashinfer`` with a ``fused_moe`` namespace and ``_build_meta``."""
    mod = types.ModuleType("fakeflashinfer")
    mod._build_meta = types.SimpleNamespace(__version__="0.6.18", __git_commit__="69ff11fc4954")  # type: ignore[attr-defined]
    if var_kw:

        def cfm(input: Any, *args: Any, **kwargs: Any) -> None: ...
    elif situ_kw:

        def cfm(
            input: Any, token_selected_experts: Any, *, situ_beta: Any = None, situ_linear_beta: Any = None
        ) -> None: ...
    else:

        def cfm(input: Any, token_selected_experts: Any, swiglu_alpha: Any = None) -> None: ...

    act = _Act if situ_enum else enum.IntEnum("ActivationType", {"Swiglu": 3})
    mod.fused_moe = types.SimpleNamespace(cutlass_fused_moe=cfm, ActivationType=act)  # type: ignore[attr-defined]
    return mod


def test_probe_detects_cutlass_situ_from_the_signature() -> None:
    info = probe.probe_flashinfer(fake_flashinfer())
    assert info.importable and info.has_cutlass_situ and info.has_situ_enum and not info.missing
    assert (info.version, info.git_commit) == ("0.6.18", "69ff11fc4954")
    assert info.as_dict()["has_cutlass_situ"] is True


@pytest.mark.parametrize(
    ("kwargs", "missing"),
    [
        ({"situ_kw": False}, "cutlass_fused_moe(*, situ_beta=..., situ_linear_beta=...)"),
        ({"var_kw": True}, "cutlass_fused_moe(*, situ_beta=..., situ_linear_beta=...)"),
        ({"situ_enum": False}, "flashinfer.fused_moe.ActivationType.Situ"),
    ],
    ids=["old_signature", "only_kwargs", "no_situ_enum"],
)
def test_missing_api_raises_a_clear_error(kwargs: dict[str, bool], missing: str) -> None:
    fake = fake_flashinfer(**kwargs)
    with pytest.raises(probe.FlashInferApiMissing) as err:
        probe.require_cutlass_situ(fake)
    text = str(err.value)
    for needle in (missing, "FlashInfer 0.6.18", "69ff11fc4954", "#4460", "0.7.0", "upgrade FlashInfer", "SwigluBias"):
        assert needle in text, f"{needle!r} missing from: {text}"


def test_situ_kwargs_are_per_expert_fp32_tensors() -> None:
    torch = pytest.importorskip("torch")
    fake = fake_flashinfer()
    kw = probe.cutlass_situ_kwargs(224, device="cpu", module=fake, fused_moe=fake.fused_moe)  # type: ignore[attr-defined]
    assert kw["activation_type"] is _Act.Situ
    for name, value in (("situ_beta", 4.0), ("situ_linear_beta", 25.0)):
        t = kw[name]
        assert t.dtype == torch.float32 and tuple(t.shape) == (224,) and bool((t == value).all()), f"{name}: {t}"


def test_not_importable_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer -> ImportError
    info = probe.probe_flashinfer()
    assert not info.importable and info.import_error and "halted" in info.import_error, info
    with pytest.raises(probe.FlashInferApiMissing, match="cannot be imported"):
        probe.require_cutlass_situ()


@pytest.mark.parametrize(
    ("cap", "importable", "situ", "quant_reason", "moe_reason"),
    [
        (None, True, True, "no CUDA device", "no CUDA device"),
        ((9, 0), True, True, "this GPU is sm90", "this GPU is sm90"),
        ((10, 0), False, False, probe.REASON_NO_FLASHINFER, "this GPU is sm100"),
        ((12, 0), True, False, None, "lacks it"),
        ((12, 0), True, True, None, None),
    ],
)
def test_skip_reasons(
    monkeypatch: pytest.MonkeyPatch, cap: tuple[int, int] | None, importable: bool, situ: bool,
    quant_reason: str | None, moe_reason: str | None,
) -> None:  # fmt: skip
    monkeypatch.setattr(probe, "cuda_capability", lambda: cap)
    info = probe.FlashInferInfo(importable=importable, version="0.7.2.post1", has_cutlass_situ=situ)
    monkeypatch.setattr(probe, "probe_flashinfer", lambda *a, **k: info)
    q, m = probe.quantizer_skip_reason(), probe.cutlass_situ_skip_reason()
    if quant_reason is None:
        assert q is None, q
    else:
        assert q is not None and quant_reason in q, q
        if cap is None or cap[0] < 10:
            assert q.startswith(probe.REASON_NEEDS_SM100)
    if moe_reason is None:
        assert m is None, m
    else:
        assert m is not None and m.startswith(probe.REASON_NEEDS_SM120_SITU) and moe_reason in m, m


def test_plugin_and_light_modules_do_not_import_torch_or_numerics() -> None:
    code = (
        "import sys; import pytest_sskj.plugin, pytest_sskj.numerics, pytest_sskj.numerics.shapes, "
        "pytest_sskj.numerics.flashinfer_probe; "
        "heavy = [m for m in ('torch', 'flashinfer', 'pytest_sskj.numerics.mx') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"heavy modules imported at startup: {done.stdout} {done.stderr[-500:]}"
