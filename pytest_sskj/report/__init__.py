"""Reporting: run directory and manifest, result writers, Allure adapter, plots, release marking."""
