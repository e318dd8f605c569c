"""The rogerwilco gatekeeper: enforces the RW1 handoff protocol on Kafka."""

__version__ = "0.1.0"
