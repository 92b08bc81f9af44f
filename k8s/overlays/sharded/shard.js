// Shards the timer service's collections (docs/operations.md, "Sharding
// MongoDB"). Run it through a mongos:
//   mongosh "$TIMER_MONGO_URL" --file shard.js
// with TIMER_MONGO_DB (default "timer") and TIMER_BUCKETS (default 60) as the
// service has them. Idempotent, and safe before or after the service first
// starts: each shard-key index is created here (createIndex of an existing
// index does nothing), and a collection already sharded on the same key is
// left as it is. One sharded on another key is an error (exit 1).
// leases, pointers, rounds, brokers, biz_types, meta and audit hold a handful
// of documents (or are written rarely) and stay unsharded.

const dbName = process.env.TIMER_MONGO_DB || "timer";
const buckets = Number(process.env.TIMER_BUCKETS || "60");
if (!Number.isInteger(buckets) || buckets < 1 || buckets > 3600) {
  throw new Error(`TIMER_BUCKETS must be an integer in 1..3600, got ${process.env.TIMER_BUCKETS}`);
}
const target = db.getSiblingDB(dbName);

function shardKeyOf(ns) {
  const found = db.getSiblingDB("config").collections.findOne({ _id: ns, dropped: { $ne: true } });
  return found ? found.key : null;
}

function shard(name, key) {
  const ns = `${dbName}.${name}`;
  const wanted = JSON.stringify(key);
  target.getCollection(name).createIndex(key);
  try {
    sh.shardCollection(ns, key);
  } catch (error) {
    // Already sharded (by an earlier run, or one running beside this one):
    // fine on the same key, an error on another.
    const existing = shardKeyOf(ns);
    if (existing === null) throw error;
    if (JSON.stringify(existing) !== wanted) {
      throw new Error(`${ns} is sharded on ${JSON.stringify(existing)}, expected ${wanted}`);
    }
    print(`already sharded: ${ns} on ${wanted}`);
    return;
  }
  print(`sharded: ${ns} on ${wanted}`);
}

try {
  sh.enableSharding(dbName);
} catch (error) {
  if (error.codeName !== "AlreadyInitialized") throw error;
}
print(`sharding enabled on database ${dbName}`);

// Loads and claims ask for one second of the owned partitions: the partition
// first targets them to its shards. Then _id, not the second: a retry or a
// reschedule may change a job's second in place, and mongos refuses an update
// that changes a shard-key field without the full key in its filter; a job's
// partition and _id never change.
for (let n = 0; n < buckets; n++) {
  shard(`jobs_b${n}`, { partition: 1, _id: 1 });
}
// The slot is partition x 2^44 + second: a partition's seconds are one range.
shard("seconds", { _id: 1 });
// Looked up by identity only.
shard("locator", { _id: "hashed" });
print(`done: jobs_b0..jobs_b${buckets - 1}, seconds and locator sharded; leases, ` +
  "pointers, rounds, brokers, biz_types, meta and audit left unsharded");
