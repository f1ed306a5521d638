"""Alert notifications: routes (where alerts go) and deliveries (one per alert, route and event)."""
