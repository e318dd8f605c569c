"""Shared pytest configuration. Plugins are listed here; append, don't replace."""

pytest_plugins = ["tests.fixtures_services"]
