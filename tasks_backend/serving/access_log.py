"""gunicorn's logger with a cheaper access line: the same line, built from only the fields it shows.

gunicorn builds every access line from a dictionary of every field it could show (each request and response
header, each WSGI environ entry), about a tenth of a small request's CPU in a web worker. The line of
`ACCESS_FORMAT` is built here from its own fields, escaped as gunicorn escapes them, and logged through the
same `gunicorn.access` logger; any other `--access-logformat` is gunicorn's to build.
Rule: the line is byte for byte what gunicorn would write (a test holds the two side by side).
"""

from __future__ import annotations

import logging
import traceback
from datetime import timedelta
from typing import Any

from gunicorn.glogging import Logger

from .logs import CLIENT_ADDRESS

#: gunicorn's default access line, with the client the entrance found (behind TASKS_BACKEND_TRUSTED_PROXIES reverse
#: proxies, the forwarded client's address; otherwise the peer's) in place of the peer's address.
ACCESS_FORMAT = f'%({{{CLIENT_ADDRESS}}}e)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'


def _quoted(value: Any) -> Any:
    """A field as gunicorn's `SafeAtoms` gives it: a string's double quotes escaped, anything else as it is."""
    return value.replace('"', '\\"') if isinstance(value, str) else value


def _enabled(cfg: Any) -> bool:
    """Whether any access log is set up (gunicorn's own test, which its older releases do not keep on the logger)."""
    return bool(cfg.accesslog or cfg.logconfig or cfg.logconfig_dict or getattr(cfg, "logconfig_json", None)
                or (cfg.syslog and not cfg.disable_redirect_access_to_syslog))


class AccessLogger(Logger):  # type: ignore[misc]
    """`logger_class` of `tasks-backend web` (see `gunicorn_conf`)."""

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: timedelta) -> None:
        if self.cfg.access_log_format != ACCESS_FORMAT:
            super().access(resp, req, environ, request_time)
            return
        if not _enabled(self.cfg):
            return
        status = resp.status
        if isinstance(status, str):
            status = status.split(None, 1)[0]
        sent = getattr(resp, "sent", None)
        client = _quoted(environ.get(CLIENT_ADDRESS, "-"))
        user = _quoted(self._get_user(environ) or "-")
        request_line = _quoted(f"{environ['REQUEST_METHOD']} {environ['RAW_URI']} {environ['SERVER_PROTOCOL']}")
        size = "-" if sent is None else str(sent)
        referer, agent = _quoted(environ.get("HTTP_REFERER", "-")), _quoted(environ.get("HTTP_USER_AGENT", "-"))
        line = f'{client} - {user} {self.now()} "{request_line}" {_quoted(status)} {size} "{referer}" "{agent}"'
        log = self.access_log
        try:
            # The line is whole: no arguments, so a '%' in a path is not read as a placeholder. Handed to the
            # logger's handlers as `info` would, without its search of the stack for the caller's line, which the
            # access line does not show.
            if log.isEnabledFor(logging.INFO):
                log.handle(log.makeRecord(log.name, logging.INFO, "(unknown file)", 0, line, (), None))
        except Exception:  # as gunicorn does: a line that cannot be logged is reported, the request goes on
            self.error(traceback.format_exc())
