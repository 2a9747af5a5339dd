# RabbitMQ for the tests that run against it as the broker (tests/workers/test_durability.py, test_rabbitmq.py,
# the soak): nothing to do when something listens on 5672; otherwise Debian's rabbitmq-server is installed
# when missing and started with its init script. The tests make a vhost of their own and delete it.
# `docker compose --profile rabbitmq up` is the other way to get one (docker-compose.yml).
RABBITMQ_PORT ?= 5672

.PHONY: rabbitmq

rabbitmq:
	@$(PYTHON) -c "import socket; socket.create_connection(('127.0.0.1', $(RABBITMQ_PORT)), 1).close()" 2>/dev/null || { \
		dpkg -s rabbitmq-server >/dev/null 2>&1 || { command -v apt-get >/dev/null && \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server) >/dev/null; } || \
			{ echo "rabbitmq: RabbitMQ is needed on 127.0.0.1:$(RABBITMQ_PORT) (apt-get install rabbitmq-server)"; exit 1; }; \
		service rabbitmq-server start >/dev/null 2>&1 || rabbitmq-server -detached; \
		rabbitmqctl -q await_startup --timeout 120 || { echo "rabbitmq: the server did not start"; exit 1; }; \
	}

TEST_DEPS += rabbitmq
