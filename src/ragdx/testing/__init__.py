"""Fakes and tiny fixtures for tests of ragdx and of systems built on it."""
