"""A Redis Cluster as the job store: `REDIS_URL=redis+cluster://host:port[,host:port...]`.

The hosts are seed nodes (`connect.connect_cluster` makes the client); the client learns the rest of the cluster
from any one of them. Every script
touches the keys of one hash slot (see `keys`), so the store runs unchanged on a cluster. A cluster cannot
be the Celery broker (kombu has no cluster transport): the broker is then a Redis or RabbitMQ of its own,
and a submit publishes after the record is written (the sweeper republishes a publish that was lost).
"""

from __future__ import annotations

from typing import Any

from redis.client import CaseInsensitiveDict
from redis.cluster import ClusterPipeline, RedisCluster


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

