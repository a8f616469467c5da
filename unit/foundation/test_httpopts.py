"""httpopts.client_options: what every short-lived HTTP client of the plugin is built with."""

from __future__ import annotations

import httpx
import pytest

from pytest_sskj.httpopts import client_options


def test_plain_http_builds_no_certificate_store_and_https_keeps_verification() -> None:
    assert client_options("http://127.0.0.1:8000") == {"trust_env": False, "verify": False}
    assert client_options("HTTP://node601:30000/") == {"trust_env": False, "verify": False}
    assert client_options("https://gateway.example:443") == {"trust_env": False, "verify": True}


def test_a_plain_http_client_ignores_the_proxy_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with httpx.Client(**client_options("http://127.0.0.1:1")) as c:
        assert not c._mounts, f"a client built with client_options mounted the environment's proxy: {c._mounts}"


def test_the_options_spare_the_certificate_store_that_a_default_client_builds() -> None:
    """Not a timing assertion: the default client's verifying SSL context is what the option leaves out."""
    with httpx.Client(**client_options("http://127.0.0.1:1")) as lean, httpx.Client(trust_env=False) as default:
        ctx_lean = lean._transport._pool._ssl_context  # type: ignore[attr-defined]
        ctx_default = default._transport._pool._ssl_context  # type: ignore[attr-defined]
        assert ctx_default.verify_mode.name == "CERT_REQUIRED"
        assert ctx_lean.verify_mode.name == "CERT_NONE", "plain http: no verification, so no certificate store"
