"""The shop's dev server: quotes order totals and counts the requests it has served, in memory only.

GET /health -> "ok"; GET /hits -> {"hits": n, "pid": p} (each call adds one); GET /quote -> an
order's total, formatted by the shopfmt package, with pricing.py read afresh (a dev server reloads code).
"""

import importlib
import json
import os
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shopfmt import format_money

import pricing

hits = 0


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        global hits
        if self.path == "/health":
            self.reply(200, "ok")
        elif self.path == "/hits":
            hits += 1
            self.reply(200, json.dumps({"hits": hits, "pid": os.getpid()}))
        elif self.path == "/quote":
            importlib.reload(pricing)
            total = pricing.order_total([("2.50", 4), ("5.00", 2)], discount_percent=10)
            self.reply(200, format_money(Decimal(total)))
        else:
            self.reply(404, "not found")

    def reply(self, status: int, body: str):
        data = (body + "\n").encode()
        self.send_response(status)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", 8000), Handler).serve_forever()
