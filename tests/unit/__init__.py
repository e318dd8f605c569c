"""Unit tests: no network, no services."""
