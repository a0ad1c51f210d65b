"""Typed request models of the APIs the gateway owns, shared by their routes and tests."""
