"""gunicorn settings for `tasks-backend web`: gunicorn's own logs and the app's in our one format."""

from tasks_backend.logs import CLIENT_ADDRESS, gunicorn_logconfig

logconfig_dict = gunicorn_logconfig()
# The gevent worker reads each request head under the header deadline only on kept-alive connections, so
# keep-alive stays on; how long an idle connection waits is that deadline (TASKS_BACKEND_HEADER_TIMEOUT).
keepalive = 5
# gunicorn's default access line, with the client the entrance found (behind TASKS_BACKEND_TRUSTED_PROXIES reverse
# proxies, the forwarded client's address; otherwise the peer's) in place of the peer's address.
access_log_format = f'%({{{CLIENT_ADDRESS}}}e)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'
# Whom to believe about the client is TASKS_BACKEND_TRUSTED_PROXIES alone, for its address and its scheme alike
# (adapters.entrance reads X-Forwarded-Proto by the same rule as X-Forwarded-For): gunicorn's own rule, which
# believes a loopback peer's scheme headers and no other host's, would leave a balancer on another host unheard.
secure_scheme_headers: dict[str, str] = {}
