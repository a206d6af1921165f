"""Surviving a running cluster's failures: pure classification of what was observed."""
