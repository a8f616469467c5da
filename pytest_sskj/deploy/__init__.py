"""Deployments: parallel layouts and shapes as matrix dimensions, the layout recommendation, PD topologies.

Modules: :mod:`~pytest_sskj.deploy.layouts` (layouts and shapes, parsing and fit checks),
:mod:`~pytest_sskj.deploy.recommend` (the recommendation verdict: the layout x concurrency that meets the
SLO with the highest throughput), :mod:`~pytest_sskj.deploy.topology` (named server groups and a router,
PD disaggregation), :mod:`~pytest_sskj.deploy.router` (the real ``sglang-router`` process).
"""
