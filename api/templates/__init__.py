"""The service's pages as Jinja2 templates (autoescaped): the index, the report and its charts."""

from __future__ import annotations

import re
from html import escape

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

PAGES = Environment(loader=PackageLoader("api"), autoescape=True, trim_blocks=True)
# The facts are written for plain text: their `code` spans become <code> in a page.
PAGES.filters["code"] = lambda text: Markup(
    re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text, quote=False))
)
