"""The twin's shim ``sglang`` package: put first on a twin node's PYTHONPATH so that the unchanged command
``python3 -m sglang.launch_server ...`` starts a stand-in rank (:mod:`pytest_sskj.twin.rank`).  Not the real
sglang: it has nothing but ``launch_server``."""

__version__ = "0.5.23+sskj-twin"
