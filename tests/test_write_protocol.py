"""The write side of a store is one protocol (ragdx.protocols.WritableStore), and both of ragdx's
stores have it: every method, with the protocol's parameters in the protocol's order."""

import inspect

import pytest

from ragdx.protocols import Store, WritableStore
from ragdx.store.sqlite import SQLiteStore

WRITE_METHODS = [name for name, value in vars(WritableStore).items()
                 if inspect.isfunction(value) and not name.startswith("_")]


def _parameters(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_the_protocol_lists_the_writes_ingest_and_embedding_use():
    assert len(WRITE_METHODS) == 17
    assert {"insert_version", "versions_of", "write_vectors", "transaction", "audit", "delete_document"} <= set(WRITE_METHODS)


@pytest.mark.parametrize("module, cls", [("ragdx.store.sqlite", "SQLiteStore"), ("ragdx.store.postgres", "PostgresStore")])
@pytest.mark.parametrize("method", WRITE_METHODS)
def test_both_stores_write_as_the_protocol_says(module, cls, method):
    import importlib
    store_cls = getattr(importlib.import_module(module), cls)
    impl = getattr(store_cls, method, None)
    assert impl is not None, f"{cls} has no {method}"
    assert _parameters(impl) == _parameters(getattr(WritableStore, method))


def test_an_open_sqlite_store_is_a_writable_store(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    try:
        assert isinstance(store, WritableStore) and isinstance(store, Store)
    finally:
        store.close()

