// redlock_latency.js - node-redlock (the version in package-lock.json)
// acquire+release latency over the given Redis masters, one at a time,
// uncontended, for beside bench/redlock-bench (bench/redlock.sh --node).
//   node redlock_latency.js ITERS URL1 ... URLn
// Prints the median, p90, p99 and mean of one pair in microseconds.
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

async function main() {
  const iters = parseInt(process.argv[2], 10);
  const urls = process.argv.slice(3);
  const clients = urls.map((u) => new Redis(u, { lazyConnect: false }));
  await Promise.all(clients.map((c) => c.ping()));
  const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
  redlock.on('clientError', () => {});
  const warm = Math.floor(iters / 10);
  const ns = [];
  for (let i = 0; i < warm + iters; i++) {
    const t0 = process.hrtime.bigint();
    const lock = await redlock.lock('bench-node-redlock', 10000);
    await lock.unlock();
    const t = Number(process.hrtime.bigint() - t0);
    if (i >= warm) ns.push(t);
  }
  ns.sort((a, b) => a - b);
  const pct = (p) => ns[Math.floor(p * (ns.length - 1))] / 1000;
  const mean = ns.reduce((a, b) => a + b, 0) / ns.length / 1000;
  console.log(`node-redlock ${require('redlock/package.json').version} over ${urls.length}: ` +
    `median ${pct(0.5).toFixed(1)} us, p90 ${pct(0.9).toFixed(1)}, ` +
    `p99 ${pct(0.99).toFixed(1)}, mean ${mean.toFixed(1)} (${iters} pairs)`);
  clients.forEach((c) => c.disconnect());
}
main().catch((e) => { console.error(e); process.exit(1); });
