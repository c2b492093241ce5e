"""The operator's console: what the gateway saves, whether quality holds, where the money goes, in a browser.

    mount(app, gw)                       # serving/app.py: pages under /console on the gateway's port
    open http://127.0.0.1:8080/console   # log in once with an admin key (docs/console.md)
    switchcraft traffic report --log runs/gateway/log --out runs/traffic    # the same numbers, no browser

Server-rendered (Jinja2 templates in templates/), charts drawn as SVG on the server (charts.py): no script, no
CDN, works offline. The numbers come from SQL over the decision log (logdb.py, queries.py, quality.py) and the
state store's ledger; the same functions write `switchcraft traffic report` (report.py).
"""

from __future__ import annotations


def mount(app, gw) -> None:
    """Add the console's routes (serving/console/views.py) to the gateway's app."""
    from serving.console.views import console_routes

    app.include_router(console_routes(gw))
