"""Adapters for agent frameworks: each imports its framework, which the core install does
not bring (``pip install 'ptc-retry[smolagents]'``). See docs/integrations.md."""
