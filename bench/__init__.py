"""The benchmark suite: product and baselines under the same Redis, gunicorn settings and load generator."""
