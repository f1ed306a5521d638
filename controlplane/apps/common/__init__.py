"""Helpers shared by the domain apps (not an installed app: no models)."""
