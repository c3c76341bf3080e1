"""kombu's Redis transport with one fix (RedisChannel), for the redis:// and rediss:// broker URLs
(registered by portal.ops.broker)."""

import redis
from kombu.transport import redis as kombu_redis


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, whose close on a lost connection is a connection error.

    When Redis goes away while the worker waits in BRPOP and holds unacknowledged tasks (every
    portal task is acks_late), Celery collects the connection: the channel's close fails reading
    the BRPOP reply, which leaves the channel open, and the transport is detached from the
    connection. Celery's next close of the channel then hands the unacknowledged tasks back
    through a client built from the detached transport's settings, which are None: an
    AttributeError, which Celery does not take for a broker error, so the worker exited
    ("Unrecoverable error") instead of reconnecting (found by the soak's Redis restart; kombu
    5.7.0). Raised as a connection error, Celery ignores it and reconnects; the tasks stay in
    Redis's unacked set, restored after the visibility timeout, and beat's sweeps redo the work
    of those lost with a Redis that keeps nothing."""

    def _connparams(self, asynchronous=False):
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection was closed")
        return super()._connparams(asynchronous=asynchronous)


class RedisTransport(kombu_redis.Transport):
    Channel = RedisChannel
