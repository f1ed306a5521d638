"""The ``unicron`` sub-commands, one module per noun."""
