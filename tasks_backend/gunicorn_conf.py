"""gunicorn settings for `tasks-backend web`: gunicorn's own logs and the app's in our one format."""

from tasks_backend.logs import gunicorn_logconfig

logconfig_dict = gunicorn_logconfig()
