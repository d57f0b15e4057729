"""Test suite for quadax."""
