"""The web front door: the dashboard's sign-in and assets, and the notebooks' route.

A client of the same API with the same authorization (DESIGN.md): the dashboard calls
``/api/v1`` with the session cookie set at sign-in; nothing here reads the store directly.
"""
