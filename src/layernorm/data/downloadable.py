"""Downloadable datasets (filled in below)."""
