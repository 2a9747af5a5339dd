"""A Redis Cluster as the job store: `REDIS_URL=redis+cluster://host:port[,host:port...]`.

The hosts are seed nodes; the client learns the rest of the cluster from any one of them. Every script
touches the keys of one hash slot (see `keys`), so the store runs unchanged on a cluster. A cluster cannot
be the Celery broker (kombu has no cluster transport): the broker is then a Redis or RabbitMQ of its own,
and a submit publishes after the record is written (the sweeper republishes a publish that was lost).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from redis.backoff import NoBackoff
from redis.client import CaseInsensitiveDict
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.retry import Retry

from ..config import CLUSTER_SCHEMES
from .jobs import keepalive_options


class ScriptingPipeline(ClusterPipeline):
    """A cluster pipeline that runs scripts by SHA and deletes a job's keys in one command.

    redis-py refuses EVALSHA in a cluster pipeline because a node may not have the script; the store
    already answers NoScriptError by loading its scripts (on every primary) and running the round trip
    again, as it does after a restart of a single server. The node is chosen by the script's first key."""

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)  # type: ignore[no-untyped-call]

    def execute_in_order(self) -> list[Any]:
        """Run the queued commands so that each takes effect after the ones queued before it, as one server runs
        a pipeline: one round trip per run of consecutive commands for the same node, and nothing after a run
        that failed. (`execute` sends every node its part at once.)"""
        queued = list(self._execution_strategy.command_queue)
        self.reset()  # type: ignore[no-untyped-call]
        runs: list[tuple[str, list[Any]]] = []
        for command in queued:
            slot = self.determine_slot(*command.args)  # type: ignore[no-untyped-call]
            node = "" if slot is None else self.nodes_manager.get_node_from_slot(slot).name  # type: ignore[no-untyped-call]
            if runs and runs[-1][0] == node:
                runs[-1][1].append(command)
            else:
                runs.append((node, [command]))
        replies: list[Any] = []
        for _, commands in runs:
            for command in commands:
                self.execute_command(*command.args, **command.options)  # type: ignore[no-untyped-call]
            replies += self.execute()  # type: ignore[no-untyped-call]
        return replies

    def delete(self, *names: Any) -> Any:  # type: ignore[override]  # queued in the pipeline, not an int
        """One DEL for the keys of one slot (redis-py refuses a pipelined DEL of several keys; the slot check
        still refuses keys of several slots)."""
        return self.execute_command("DEL", *names)  # type: ignore[no-untyped-call]


class ScriptingCluster(RedisCluster):
    def limit_connections(self, limit: int) -> None:
        """Let each node's pool open up to `limit` connections (redis-py's default is 100 per node), for the
        nodes known now and those found later."""
        self.nodes_manager.connection_kwargs["max_connections"] = limit
        for node in self.get_nodes():  # type: ignore[no-untyped-call]
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.max_connections = limit

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe: Any = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.__class__ = ScriptingPipeline  # the same object, with EVALSHA allowed again
        if transaction:
            # redis-py parses the replies of a cluster MULTI/EXEC with its cluster callbacks only, so XREAD came
            # back as the wire's map, not as the list a single server's client gives: add the node's parsers.
            node: Any = self.get_default_node()  # type: ignore[no-untyped-call]
            pipe.cluster_response_callbacks = CaseInsensitiveDict(
                {**node.redis_connection.response_callbacks, **self.cluster_response_callbacks})
        return pipe


def seed_nodes(url: str) -> tuple[list[ClusterNode], dict[str, Any]]:
    """The seed nodes of a `redis+cluster://` URL, and the connection options it carries."""
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"not a Redis Cluster URL: {parts.scheme}://")
    credentials, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for host in hosts.split(","):
        name, _, port = host.strip().rpartition(":")
        if not name or not port.isdigit():
            raise ValueError("a Redis Cluster URL names its seed nodes as host:port, comma-separated")
        nodes.append(ClusterNode(name.strip("[]"), int(port)))  # type: ignore[no-untyped-call]
    options: dict[str, Any] = {}
    if credentials:
        user, _, password = credentials.partition(":")
        options.update(username=unquote(user) or None, password=unquote(password) or None)
    if parts.scheme.startswith("rediss"):
        options["ssl"] = True
    return nodes, options


def connect_cluster(url: str, timeout_s: float, **options: Any) -> ScriptingCluster:
    """A cluster client that fails as fast as the single-server one: a node that is down or failing over
    turns into a 503 with Retry-After, not into a request that hangs while the cluster elects a replica.

    One retry (on a fresh view of the slots) covers a redirect after a resharding or a failover that is
    already done. `options` go to redis-py's `RedisCluster` as they are."""
    nodes, from_url = seed_nodes(url)
    return ScriptingCluster(
        startup_nodes=nodes,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=min(timeout_s, 1.0),
        socket_keepalive=True,
        socket_keepalive_options=keepalive_options(),
        retry=Retry(NoBackoff(), 1),
        **from_url,
        **options,
    )
