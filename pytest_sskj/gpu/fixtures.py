"""The ``gpu`` marker at run time: leases, ``CUDA_VISIBLE_DEVICES``, skip or fail, and the GPU fixtures.

For every test marked ``@pytest.mark.gpu(...)`` (or using the ``gpus`` or ``gpu_lease`` fixture, which
means ``gpu(count=1)``), ``pytest_runtest_setup`` leases matching idle devices from the per-host ledger
before any fixture runs, sets ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` in ``os.environ`` (so
servers the test launches inherit them), and restores both and releases the lease after the last
fixture's teardown -- also on failure, timeout and Ctrl-C (pytest still tears down), while a holder
killed outright is reclaimed by the ledger.  A request the host cannot meet skips the test with the
reason, or fails it under ``--sskj-require-gpu``.  :class:`GpuSession` (``config.stash[EXTRA_KEY]
["gpu_allocator"]``) owns the inventory and the ledger; on the controller the GPU facts go into the run
manifest and the report header.  Fixtures: ``gpus``, ``gpu_lease``, ``gpu_inventory``.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass, field

import pytest

from pytest_sskj.errors import GpuUnavailable
from pytest_sskj.gpu.inventory import GpuInfo, Inventory, load_inventory
from pytest_sskj.gpu.leases import Holder, Lease, LeaseLedger
from pytest_sskj.markers import GpuRequest, parse_gpu_marker
from pytest_sskj.stash import EXTRA_KEY, MANIFEST_KEY, SETTINGS_KEY

__all__ = ["GpuSession", "get_gpu_session", "gpu_inventory", "gpu_lease", "gpus"]

_LEASE_KEY = pytest.StashKey[Lease]()
_SAVED_ENV_KEY = pytest.StashKey[dict[str, str | None]]()
_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


@dataclass
class GpuSession:
    """Per-session GPU state: where the inventory comes from, the ledger, the wait and the skip/fail choice.

    ``environ`` is the ``CUDA_*`` environment at session start: inventories are read against it, not
    against the ``CUDA_VISIBLE_DEVICES`` a running lease has set.
    """

    config: pytest.Config
    wait_s: float
    require_gpu: bool
    environ: dict[str, str]
    ledger: LeaseLedger = field(default_factory=LeaseLedger)
    used_ledger: bool = False
    _inventory: Inventory | None = None

    @classmethod
    def from_config(cls, config: pytest.Config) -> GpuSession:
        settings = config.stash[SETTINGS_KEY]
        env = {k: v for k, v in os.environ.items() if k in _ENV_NAMES}
        return cls(config=config, wait_s=settings.gpu_wait_s, require_gpu=settings.require_gpu, environ=env)

    def inventory(self) -> Inventory:
        """The inventory read once per session (hook first, then NVML)."""
        if self._inventory is None:
            self._inventory = self.refresh()
        return self._inventory

    def refresh(self) -> Inventory:
        """A fresh read (free memory and processes change while tests run)."""
        return load_inventory(self.config, self.environ)

    def lease(self, request: GpuRequest, holder_label: str, wait_s: float | None = None) -> Lease:
        """Lease devices for ``request`` for this process; raises :class:`GpuUnavailable` with the reason."""
        inv = self.refresh()
        self._inventory = self._inventory or inv
        self.used_ledger = True
        return self.ledger.acquire(
            request, inv, Holder.current(holder_label), self.wait_s if wait_s is None else wait_s, refresh=self.refresh
        )

    def release_all(self) -> list[str]:
        """End every lease this process still holds (session end, interrupt)."""
        return self.ledger.release_pid(os.getpid()) if self.used_ledger else []


def get_gpu_session(config: pytest.Config) -> GpuSession:
    """This session's :class:`GpuSession` (created on first use)."""
    extra = config.stash[EXTRA_KEY]
    gs = extra.get("gpu_allocator")
    if not isinstance(gs, GpuSession):
        gs = GpuSession.from_config(config)
        extra["gpu_allocator"] = gs
    return gs


def _request_of(item: pytest.Item) -> GpuRequest | None:
    mark = item.get_closest_marker("gpu")
    if mark is None:
        names = getattr(item, "fixturenames", ())
        return GpuRequest() if "gpus" in names or "gpu_lease" in names else None
    try:
        return parse_gpu_marker(mark)
    except (TypeError, ValueError) as exc:
        pytest.fail(
            f"{item.nodeid}: invalid @pytest.mark.gpu{_mark_args(mark)}: {exc}\n  accepted: "
            "gpu(count=1, arch='sm120', min_capability=(9, 0) or '9.0', min_free_gib=40)",
            pytrace=False,
        )


def _mark_args(mark: pytest.Mark) -> str:
    parts = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
    return f"({', '.join(parts)})"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


# --- hooks ------------------------------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    if SETTINGS_KEY in config.stash:
        get_gpu_session(config)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller: inventory into the report header and the run manifest (before the header prints)."""
    config = session.config
    if SETTINGS_KEY not in config.stash or _is_worker(config):
        return
    inv = get_gpu_session(config).inventory()
    config.stash[EXTRA_KEY]["gpu_header"] = inv.header_line()
    manifest = config.stash.get(MANIFEST_KEY, None)
    if manifest is not None:
        manifest.update(gpu=inv.facts())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Lease before any fixture runs, so fixtures that launch servers already see the devices."""
    request = _request_of(item)
    if request is None or SETTINGS_KEY not in item.config.stash:
        return
    gs = get_gpu_session(item.config)
    try:
        lease = gs.lease(request, item.nodeid)
    except GpuUnavailable as exc:
        if gs.require_gpu:
            pytest.fail(f"{exc} (--sskj-require-gpu: failing instead of skipping)", pytrace=False)
        # reported at the test's own location, like @pytest.mark.skip
        raise pytest.skip.Exception(str(exc), _use_item_location=True) from None
    item.stash[_LEASE_KEY] = lease
    item.stash[_SAVED_ENV_KEY] = {k: os.environ.get(k) for k in _ENV_NAMES}
    os.environ.update(lease.env())


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """After every fixture is torn down: restore the environment and end the lease."""
    try:
        return (yield)
    finally:
        saved = item.stash.get(_SAVED_ENV_KEY, None)
        if saved is not None:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            del item.stash[_SAVED_ENV_KEY]
        lease = item.stash.get(_LEASE_KEY, None)
        if lease is not None:
            lease.release()
            del item.stash[_LEASE_KEY]


def pytest_sessionfinish(session: pytest.Session) -> None:
    extra = session.config.stash.get(EXTRA_KEY, {})
    gs = extra.get("gpu_allocator")
    if isinstance(gs, GpuSession):
        gs.release_all()


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture
def gpu_lease(request: pytest.FixtureRequest) -> Lease:
    """The lease of a ``gpu``-marked test (its ``.env()`` is what servers need)."""
    lease: Lease | None = request.node.stash.get(_LEASE_KEY, None)
    if lease is None:  # pragma: no cover - pytest_runtest_setup leases for every test using `gpu_lease`
        pytest.fail(f"{request.node.nodeid}: no GPU lease was taken", pytrace=False)
    return lease


@pytest.fixture
def gpus(request: pytest.FixtureRequest) -> list[GpuInfo]:
    """The leased devices of this test, in the order ``CUDA_VISIBLE_DEVICES`` lists them (cuda:0 first)."""
    lease: Lease | None = request.node.stash.get(_LEASE_KEY, None)
    if lease is None:  # pragma: no cover - pytest_runtest_setup leases for every test using `gpus`
        pytest.fail(f"{request.node.nodeid}: no GPU lease was taken", pytrace=False)
    return list(lease.gpus)


@pytest.fixture(scope="session")
def gpu_inventory(pytestconfig: pytest.Config) -> Inventory:
    """The GPU inventory of this host as this session sees it (``.gpus``, ``.reason`` when empty)."""
    return get_gpu_session(pytestconfig).inventory()
