"""gunicorn settings for `tasks-backend web`: gunicorn's own logs and the app's in our one format."""

import os
import signal
from typing import Any

from tasks_backend.serving.access_log import ACCESS_FORMAT
from tasks_backend.serving.logs import gunicorn_logconfig
from tasks_backend.serving.processes import die_with_parent

logconfig_dict = gunicorn_logconfig()
if os.environ.get("TASKS_BACKEND_DEV") == "1":
    # Under `tasks-backend run` (one terminal for everything) gunicorn's own start and stop lines (booting,
    # listening, handling a signal, each worker exiting) say what the ready banner and the supervisor's one
    # line per process already say; its warnings and errors stay.
    logconfig_dict["loggers"]["gunicorn.error"]["level"] = "WARNING"
# The gevent worker reads each request head under the header deadline only on kept-alive connections, so
# keep-alive stays on; how long an idle connection waits is that deadline (TASKS_BACKEND_HEADER_TIMEOUT).
keepalive = 5
# gunicorn's default access line with the client the entrance found, built by a logger that reads only its fields.
access_log_format = ACCESS_FORMAT
logger_class = "tasks_backend.serving.access_log.AccessLogger"
# Whom to believe about the client is TASKS_BACKEND_TRUSTED_PROXIES alone, for its address and its scheme alike
# (adapters.entrance reads X-Forwarded-Proto by the same rule as X-Forwarded-For): gunicorn's own rule, which
# believes a loopback peer's scheme headers and no other host's, would leave a balancer on another host unheard.
secure_scheme_headers: dict[str, str] = {}
# Nor does a loopback peer move the app's mount point (gunicorn's default believes its SCRIPT_NAME and PATH_INFO).
forwarder_headers = ""
# gunicorn's control interface is not used here, and its default socket is one path per user: a second web
# process on the host (another `make run`, a test) would take it over from the first.
control_socket_disable = True


def on_starting(server: Any) -> None:
    """With no scheme or forwarder header to believe (as set above, unless an operator set some), whom gunicorn
    trusts to send them changes nothing: trusting every peer spares it parsing the peer's address on each request
    (cleartext HTTP/2, which that list also guards, is on only when asked for)."""
    cfg = server.cfg
    if not cfg.secure_scheme_headers and not cfg.forwarder_headers and "h2" not in getattr(cfg, "http_protocols",
                                                                                             ["h1"]):
        cfg.set("forwarded_allow_ips", "*")


def post_fork(server: Any, worker: Any) -> None:
    """A worker dies with the master however the master ends (on Linux): one left behind by a killed master
    would hold its streams and the port's open connections until it noticed, a second or more later. And it
    reads its settings as plain attributes (`settle`)."""
    settle(worker.cfg)
    die_with_parent(signal.SIGKILL)


def settle(cfg: Any) -> None:
    """Each of gunicorn's settings kept on `cfg` as a plain attribute, in a worker that has just forked.

    gunicorn's `Config` answers `cfg.name` from its `__getattr__`, which Python calls only once the ordinary
    lookup has failed, and that failure builds an `AttributeError` and its message first: some twenty-five a
    request (the parser's limits, the header rules, the hooks, the access line's settings), an eighth of the
    instructions a web worker spends on a submit. A worker's settings do not change after the fork (a reload
    starts new workers), so each is read once here. The properties `Config` computes from them (`is_ssl`,
    `worker_class`, ...) stay its own: a property wins over an attribute of the same name.
    """
    values = vars(cfg)  # past `Config.__setattr__`, which refuses a setting's name
    for name, setting in cfg.settings.items():
        if not isinstance(getattr(type(cfg), name, None), property):
            values[name] = setting.get()
