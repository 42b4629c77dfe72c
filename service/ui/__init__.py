"""The dashboard: static page assets (``static/``) and the regret of built-in objectives.

The pages are served by :mod:`service.api.routes.ui`; their data comes from the JSON API.
"""

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
