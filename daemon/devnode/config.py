"""Generate each node's cassandra.yaml and logback.xml.

We write a *minimal* cassandra.yaml instead of patching the 2,000-line stock file: every
setting that matters for a laptop/CI node is visible here, and the rest keep Cassandra's
built-in defaults. Values use the 5.0 unit-suffixed names (``commitlog_sync_period:
10000ms``). Cassandra rejects unknown keys at startup, so a typo in ``extra_yaml`` shows
up as a start error quoting the offending key rather than being silently ignored.

YAML is emitted by a tiny block-style writer (scalars as JSON, which is valid YAML) to
avoid a PyYAML dependency for what is a flat, known structure.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .spec import ClusterSpec, NodeLayout

__all__ = [
    "MURMUR3_MIN",
    "initial_token",
    "node_yaml",
    "deep_merge",
    "to_yaml",
    "write_node_config",
]

MURMUR3_MIN = -(2**63)
_RANGE = 2**64


def initial_token(index: int, nodes: int) -> int:
    """Token of node ``index`` (1-based) when ``nodes`` share the Murmur3 ring evenly.

    Each node takes the middle of its 1/n slice, so a single node gets token 0 and no node
    ever sits on the ring's minimum token (which Murmur3 reserves for "no key").
    """
    if not 1 <= index <= nodes:
        raise ValueError(f"node index {index} outside 1..{nodes}")
    step = _RANGE // nodes
    return MURMUR3_MIN + step * (index - 1) + step // 2


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into a copy of ``base``; nested mappings merge, anything else replaces.

    Lets ``extra_yaml={"client_encryption_options": {"enabled": True}}`` keep the other
    keys of a section; a value of ``None`` removes the key (falls back to Cassandra's default).
    """
    out: dict[str, Any] = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def node_yaml(spec: ClusterSpec, index: int) -> dict[str, Any]:
    """The cassandra.yaml content (as a dict) for node ``index`` of ``spec``."""
    node = spec.node(index)
    data = node.data_dir
    base: dict[str, Any] = {
        "cluster_name": spec.name,
        # One token per node at a precomputed position: no token allocation, no vnode
        # bookkeeping, deterministic ownership (and fast startup).
        "num_tokens": 1,
        "initial_token": str(initial_token(index, spec.nodes)),
        # The ring starts empty and tokens are fixed, so nobody needs to stream data in;
        # this also lets non-seed nodes join without the 30 s bootstrap dance.
        "auto_bootstrap": False,
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
        "endpoint_snitch": "SimpleSnitch",
        "seed_provider": [
            {
                "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                "parameters": [{"seeds": f"{spec.seed_address}:{spec.storage_port}"}],
            }
        ],
        "listen_address": node.address,
        "rpc_address": node.address,
        "storage_port": spec.storage_port,
        "native_transport_port": spec.native_port,
        "start_native_transport": True,
        "data_file_directories": [str(data / "data")],
        "commitlog_directory": str(data / "commitlog"),
        "saved_caches_directory": str(data / "saved_caches"),
        "hints_directory": str(data / "hints"),
        "cdc_raw_directory": str(data / "cdc_raw"),
        "commitlog_sync": "periodic",
        "commitlog_sync_period": "10000ms",
        # Dropping a table in tests must not leave snapshots eating the disk.
        "auto_snapshot": False,
        "snapshot_before_compaction": False,
        # Two cores: one compaction thread is plenty and keeps the CPU for requests.
        "concurrent_compactors": 1,
        # On restart a node waits (default 10 s) for its known peers before serving CQL;
        # we start the seed alone first, so it would always wait the full time.
        "block_for_peers_timeout_in_secs": 2,
        "tombstone_warn_threshold": 1000,
        "tombstone_failure_threshold": 100000,
    }
    return deep_merge(base, spec.extra_yaml)


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a double-quoted JSON string is a valid YAML scalar
    raise TypeError(f"cannot write {type(value).__name__} to cassandra.yaml: {value!r}")


def _key(key: Any) -> str:
    k = str(key)
    return k if _PLAIN_KEY.match(k) else json.dumps(k)


def _emit(value: Any, indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(v, Mapping) and v or isinstance(v, (list, tuple)) and v:
                lines.append(f"{pad}{_key(k)}:")
                _emit(v, indent + 1, lines)
            elif isinstance(v, Mapping):
                lines.append(f"{pad}{_key(k)}: {{}}")
            elif isinstance(v, (list, tuple)):
                lines.append(f"{pad}{_key(k)}: []")
            else:
                lines.append(f"{pad}{_key(k)}: {_scalar(v)}")
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, Mapping) and item:
                sub: list[str] = []
                _emit(item, indent + 1, sub)
                # "- " takes the place of the first line's indentation.
                sub[0] = f"{pad}- " + sub[0][len(pad) + 2 :]
                lines.extend(sub)
            elif isinstance(item, (list, tuple)) and item:
                lines.append(f"{pad}-")
                _emit(item, indent + 1, lines)
            elif isinstance(item, Mapping):
                lines.append(f"{pad}- {{}}")
            elif isinstance(item, (list, tuple)):
                lines.append(f"{pad}- []")
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(f"{pad}{_scalar(value)}")


def to_yaml(data: Mapping[str, Any]) -> str:
    """Block-style YAML for nested dicts/lists of str/int/float/bool/None."""
    lines: list[str] = []
    _emit(data, 0, lines)
    return "\n".join(lines) + "\n"


_LOGBACK = Path(__file__).with_name("logback.xml")


def write_node_config(node: NodeLayout) -> None:
    """(Re)write node's conf/cassandra.yaml and conf/logback.xml; create its directories.

    Rewritten on every start so a changed ``extra_yaml`` takes effect on the next start.
    """
    for d in (node.conf_dir, node.log_dir, node.data_dir, node.conf_dir / "triggers"):
        d.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Generated by casque for {node.describe()}; rewritten at every start.\n"
        f"# Change it through ClusterSpec.extra_yaml, not by editing this file.\n"
    )
    tmp = node.yaml_path.with_suffix(".yaml.tmp")
    tmp.write_text(header + to_yaml(node_yaml(node.spec, node.index)), encoding="utf-8")
    tmp.replace(node.yaml_path)
    shutil.copyfile(_LOGBACK, node.logback_path)
