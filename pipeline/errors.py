"""Errors of the Spark pipeline: one line naming the problem and the fix.

They subclass ``daemon.errors.CasqueError``, so ``casque pipeline ...`` prints ``casque: <message>``
and exits non-zero without a traceback, like every other casque command.
"""

from __future__ import annotations

from daemon.base.errors import CasqueError, UsageError


class PipelineError(CasqueError):
    """A pipeline job could not run or finish (Spark, Java, the connector jar, an output path)."""


class ConnectorJarError(PipelineError):
    """The Spark Cassandra connector jar could not be fetched or failed its checksum."""


class MappingError(UsageError):
    """A ``--map``/``--const`` option names an unknown field or a column the input does not have."""


class VerificationError(PipelineError):
    """An archive read back from Parquet does not match what was selected: nothing is purged."""
