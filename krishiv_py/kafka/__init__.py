"""Kafka in and out: ``session.read_kafka(...)`` and :class:`~krishiv_py.kafka.sink.KafkaSink`.

- :mod:`~krishiv_py.kafka.source`: ``read_kafka``'s arguments → a ``KafkaSource`` plan node;
- :mod:`~krishiv_py.kafka.datasource`: the Python connector, a Spark streaming data source;
- :mod:`~krishiv_py.kafka.decode`: records → Arrow (the decoding kernel, no client, no Spark);
- :mod:`~krishiv_py.kafka.client`: the confluent-kafka calls (metadata, end offsets);
- :mod:`~krishiv_py.kafka.spark`: how Spark reads it (the read rule and the readers),
  registered with the planner and the runtime when this package is imported;
- :mod:`~krishiv_py.kafka.sink`: windowed results into a topic, keyed per window.

Nothing here imports ``confluent_kafka`` or ``pyspark`` when ``krishiv_py`` is imported.
"""

from __future__ import annotations

from krishiv_py.kafka.spark import register

register()
