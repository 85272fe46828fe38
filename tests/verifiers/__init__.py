"""Verifiers written in the tests: correct ones in other styles, and broken ones."""
