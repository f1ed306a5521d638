"""``unicron``: the command-line client of the control plane's REST API (no Django imports)."""
