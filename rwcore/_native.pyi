"""Type stubs of ``rwcore._native``, the Rust extension (native/python/src/lib.rs)."""

def digest(data: bytes) -> str:
    """The protocol's integrity digest of UTF-8 bytes: the first 12 hex digits of their SHA-256."""
