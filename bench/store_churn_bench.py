"""SecantusDB's cost per command as databases come and go on one server.

The test suite gives every test its own database and drops it afterwards. This
measures whether that churn makes the server slower for whoever comes later:
the server CPU for a fixed probe (1,000 reads by `_id` and 300 single updates on
a small collection), fresh and then after every `--step` databases were created
(60 indexed collections each, as the job store lays out its buckets), written,
updated and dropped. Quoted: the last probe's CPU over the first one's.

    .venv/bin/python bench/store_churn_bench.py --databases 300 --step 60
"""

from __future__ import annotations

import argparse
import time

import pymongo
from _common import SecantusServer, process_cpu_s


def probe(client: pymongo.MongoClient, pid: int) -> tuple[float, float]:
    coll = client["probe"]["c"]
    if coll.estimated_document_count() == 0:
        coll.insert_many([{"_id": i, "x": 0} for i in range(200)])
    started, cpu = time.perf_counter(), process_cpu_s(pid)
    for i in range(1000):
        coll.find_one({"_id": i % 200})
    for i in range(300):
        coll.update_one({"_id": i % 200}, {"$inc": {"x": 1}})
    return time.perf_counter() - started, process_cpu_s(pid) - cpu


def churn(client: pymongo.MongoClient, name: str) -> None:
    db = client[name]
    for b in range(60):
        db[f"jobs_b{b}"].create_index([("second", 1), ("state", 1)])
    db["jobs_b0"].insert_many([{"second": i, "state": "pending"} for i in range(500)])
    for i in range(50):
        db["jobs_b0"].update_many({"second": i}, {"$set": {"state": "dispatched"}})
    client.drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", type=int, default=300)
    parser.add_argument("--step", type=int, default=60)
    args = parser.parse_args()
    server = SecantusServer()
    server.start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        client: pymongo.MongoClient = pymongo.MongoClient(server.url)
        wall, first = probe(client, pid)
        print(f"fresh: probe {wall:.2f} s wall, {first:.2f} s server CPU", flush=True)
        cpu = first
        for done in range(args.step, args.databases + 1, args.step):
            for k in range(args.step):
                churn(client, f"churn{done}_{k}")
            wall, cpu = probe(client, pid)
            print(
                f"after {done} databases created and dropped: probe {wall:.2f} s wall, "
                f"{cpu:.2f} s server CPU",
                flush=True,
            )
        print(f"server CPU per command, last / fresh: {cpu / first:.2f}x")
        client.close()
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
