"""gunicorn settings for `tasks-backend web`: gunicorn's own logs and the app's in our one format."""

from tasks_backend.logs import gunicorn_logconfig

logconfig_dict = gunicorn_logconfig()
# The gevent worker reads each request head under the header deadline only on kept-alive connections, so
# keep-alive stays on; how long an idle connection waits is that deadline (TASKS_BACKEND_HEADER_TIMEOUT).
keepalive = 5
