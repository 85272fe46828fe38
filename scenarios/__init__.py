"""Shipped scenarios (YAML); installed as the package ``specaudit.shipped``."""
