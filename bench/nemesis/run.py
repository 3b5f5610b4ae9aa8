"""``python -m bench nemesis [--minutes N] [--seed N]``: the ring, the daemons and servers, the traffic, the fault
lanes for N minutes, then the drain, the checker and the report (bench/out/nemesis/<seed>/report.json, and markdown on
stdout). Everything it started is stopped at the end, the ring too, whatever happened."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

from daemon.devnode import ClusterSpec
from daemon.engine.client import Casque
from daemon.testing.sqs_clients import Key, drain, key_of

from ..env import out_dir
from . import report
from .check import DaemonCheck, Findings
from .faults import Window, apply, partition_works, unhook_partition
from .fifocheck import check_daemon_fifo
from .ledger import Send, runs
from .schedule import Fault, lane_of, plan, save
from .sqscheck import check_sqs, wall_offset
from .system import KEYSPACE, RING, System
from .traffic import DFIFO, FIFO, SHARED, STD, WORK, CasqueProducer, SqsTraffic, retried

DRAIN_S = 300.0  # after the traffic stops, how long everything sent may take to be processed


def _expected(sends: list[Send]) -> list[Send]:
    """The answered sends that must end handled (or, doomed, poisoned)."""
    return [s for s in sends if s.id and s.kind != "cron" and (s.kind, s.v) not in (("replace", 1), ("keep", 2))]


def _shared_deleted(traffic: SqsTraffic) -> dict[str, float]:
    off = wall_offset()
    with traffic.shared.lock:
        seen = {
            (d.delivery.key, d.delivery.at + off) for d in traffic.shared.deleted
        }  # answered: began precedes the send
    out: dict[str, float] = {}
    for (g, n), at in seen:
        label = f"{g}:{n}:0"
        out[label] = min(at, out.get(label, at))
    return out


class Campaign:
    """``ring``: a ring someone else started (the suite's), left whole at the end instead of stopped; ``workdir``:
    where the logs and ledgers go (bench/out/nemesis/<seed> by default)."""

    def __init__(
        self,
        minutes: float,
        seed: int,
        ring: ClusterSpec | None = None,
        keyspace: str = KEYSPACE,
        workdir: Path | None = None,
    ) -> None:
        self.minutes, self.seed, self.seconds = minutes, seed, minutes * 60
        self.workdir = workdir or out_dir("nemesis", str(seed))
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.borrowed = ring is not None
        self.system = System(self.workdir, [WORK, SHARED, DFIFO], ring or RING, keyspace)
        self.no_partition = partition_works(self.system.ring)
        self.plan = plan(seed, self.seconds, partition=not self.no_partition)
        self.windows: list[Window] = []
        self.notes: dict[str, Any] = {"partition": self.no_partition or "iptables on loopback, storage port"}
        self.fault_errors: list[str] = []
        self.example = ""  # a message the drain still waits for

    async def lane(self, faults: list[Fault], t0: float, cq: Casque, traffic: SqsTraffic) -> None:
        for f in faults:
            await asyncio.sleep(max(0.0, t0 + f.at - time.time()))
            if (
                time.time() + f.duration > t0 + self.seconds - 10
            ):  # its lane overran (a slow restart): the run ends on time
                self.notes["faults_dropped"] = self.notes.get("faults_dropped", 0) + 1
                continue
            try:
                w = await apply(f, self.system, cq, WORK)
            except Exception as exc:  # a fault that could not be done is reported, and the campaign goes on
                self.fault_errors.append(f"{f.line()}: {type(exc).__name__}: {exc}")
                print(f"  fault failed: {self.fault_errors[-1]}", flush=True)
                continue
            self.windows.append(w)
            if f.kind == "server_kill":
                traffic.server_back()
            print(f"  {time.time() - t0:7.1f}s done {f.line()} (took {w.end - w.start:.1f}s) {w.note}", flush=True)

    async def missing(self, cq: Casque, producer: CasqueProducer, traffic: SqsTraffic) -> dict[str, int]:
        """What is not yet processed, by kind: answered casque sends not handled (doomed ones: not poisoned), and SQS
        messages whose latest delivery was not deleted; empty once everything sent was."""
        done = {r.id for r in runs(self.system.record) if r.what in ("end", "fifo")}
        shared = _shared_deleted(traffic)
        poisoned = {str(p.id) for p in await retried(lambda: cq.admin.poisoned(WORK, limit=None))}
        out: dict[str, int] = defaultdict(int)
        for s in _expected(producer.sends):
            if (s.id not in poisoned) if s.kind == "doomed" else (s.id not in done and s.label not in shared):
                out[s.kind] += 1
                self.example = s.line()
        std = traffic.std.unprocessed()
        fifo = set(traffic.fifo.sent) - traffic.fifo.processed_keys()
        out |= {k: v for k, v in (("sqs-standard", len(std)), ("sqs-fifo", len(fifo))) if v}
        return dict(out)

    async def run(self) -> dict[str, Any]:
        print(
            f"nemesis: seed {self.seed}, {self.minutes} min, {len(self.plan)} faults; "
            f"partition: {self.notes['partition']}"
        )
        for f in self.plan:
            print("  " + f.line())
        save(self.plan, self.workdir / "schedule.json")
        sys_ = self.system
        settings = await asyncio.to_thread(sys_.start_ring)
        cq = await Casque.connect(settings)
        traffic: SqsTraffic | None = None
        try:
            await retried(lambda: cq.create_queue(WORK, if_missing=True, shards=4, timeout=10, max_attempts=50))
            await retried(lambda: cq.create_queue(DFIFO, if_missing=True, fifo=True, timeout=10, max_attempts=50))
            for j in range(len(sys_.servers)):
                await asyncio.to_thread(sys_.start_server, j)
            traffic = SqsTraffic(sys_.urls, self.seconds)
            for i in range(len(sys_.daemons)):
                sys_.start_daemon(i)
            producer = CasqueProducer(cq)
            await producer.start_cron()
            t0 = time.time()
            sending = asyncio.create_task(producer.run())
            traffic.start()
            lanes: dict[str, list[Fault]] = defaultdict(list)
            for f in self.plan:
                lanes[lane_of(f.kind)].append(f)
            await asyncio.gather(*(self.lane(fs, t0, cq, traffic) for fs in lanes.values()))
            await asyncio.sleep(max(0.0, t0 + self.seconds - time.time()))
            producer.stop.set()
            traffic.stop_sending.set()
            await sending
            traffic_end = time.time()
            with open(self.workdir / "sends.txt", "w") as out:
                out.writelines(s.line() + "\n" for s in producer.sends)
            print(
                f"traffic stopped at {traffic_end - t0:.0f}s: {len(producer.sends)} casque sends; draining", flush=True
            )
            left: dict[str, int] = {"?": 1}
            while time.time() < traffic_end + DRAIN_S and left:
                await asyncio.sleep(2)
                left = await self.missing(cq, producer, traffic)
                print(
                    f"  {time.time() - traffic_end:5.0f}s into the drain, not yet processed: {left} "
                    f"(e.g. {self.example})",
                    flush=True,
                )
            drained_at = time.time()
            self.notes["not_drained"] = left
            last_fault = max((w.end for w in self.windows), default=t0)
            await producer.stop_cron()
            traffic.finish()
            leftovers = self._drain_sqs(traffic)
            sys_.stop_processes()
            findings = await self._check(cq, producer, traffic, traffic_end, leftovers)
            self._write_fifo_ledger(traffic)
            self.notes |= {
                "fault_errors": self.fault_errors,
                "client_errors": traffic.errors(),
                "record": str(sys_.record),
            }
            r = report.build(
                self.seed, self.minutes, self.plan, self.windows, findings, drained_at - last_fault, self.notes
            )
            report.write(r, self.workdir / "report.json")
            return r
        finally:
            if traffic is not None:
                traffic.finish()
            sys_.stop_processes()
            await cq.close()
            unhook_partition(sys_.ring)
            await asyncio.to_thread(sys_.restore if self.borrowed else sys_.stop_ring)

    def _write_fifo_ledger(self, traffic: SqsTraffic) -> None:
        """The SQS FIFO clients' ledger, one line per send answer, delivery and delete (monotonic seconds), beside the
        daemons' record: what a FIFO violation is traced from."""
        led, off = traffic.fifo, wall_offset()
        with led.lock, open(self.workdir / "sqs-fifo.txt", "w") as out:
            for (g, n), ids in sorted(led.sent.items()):
                out.write(f"sent {g}:{n} ids={','.join(sorted(ids))} seq={led.sequences.get((g, n), '')}\n")
            for s in sorted(led.seen, key=lambda s: (s.at, s.index)):
                out.write(
                    f"seen {s.key[0]}:{s.key[1]} {s.message_id} count={s.receive_count} seq={s.sequence} "
                    f"began={s.began + off:.3f} answered={s.at + off:.3f}\n"
                )
            for (g, n), mid in led.processed:
                at = led.deleted_at.get((g, n))
                out.write(f"deleted {g}:{n} {mid}" + (f" first_answered={at + off:.3f}" if at else "") + "\n")

    def _drain_sqs(self, traffic: SqsTraffic) -> list[Key]:
        """What the queues still hold once everything sent was processed: the standard one's drained into its ledger
        (lost or left over, the ledger tells), the FIFO one's keys (its ledger tells which are left over)."""
        drain(self.system.urls, traffic.paths[STD], 11, traffic.std)
        return [key_of(m) for m in drain(self.system.urls, traffic.paths[FIFO], 11)]

    async def _check(
        self, cq: Casque, producer: CasqueProducer, traffic: SqsTraffic, traffic_end: float, fifo_left: list[Key]
    ) -> Findings:
        f = Findings()
        poisoned = {str(p.id) for q in (WORK, SHARED) for p in await retried(partial(cq.admin.poisoned, q, limit=None))}
        DaemonCheck(
            producer.sends, runs(self.system.record), poisoned, _shared_deleted(traffic), self.windows, traffic_end
        ).check(f)
        check_daemon_fifo(f, producer.sends, runs(self.system.record), self.windows)
        check_sqs(f, traffic, fifo_left, self.seconds, self.windows)
        return f


def main(minutes: float, seed: int) -> int:
    r = asyncio.run(Campaign(minutes, seed).run())
    print(report.markdown(r))
    return 1 if r["violations"] or r["lost"] or r["duplicates_unexplained"] else 0
