#!/usr/bin/env node
// node_worker.js - one worker of the benchmark loop for the Node.js peers.
//
//   node node_worker.js --peer redlock|semaphore --url URL --name NAME
//        --hold-us H --seconds D [--start-ns T] [--worker I]
//        [--threads T [--distinct]] --records FILE
//
// Same loop and record format as dlock-bench's worker mode: from the
// CLOCK_MONOTONIC instant T (process.hrtime.bigint() reads CLOCK_MONOTONIC on
// Linux) until T + D: acquire, take the time, busy-wait H us, take the time,
// release; one `worker,acquire_ns,release_ns` line per pass. "Threads" are
// concurrent async loops sharing one ioredis connection (Node's model).
//
// Peers, library defaults unless the loop needs otherwise:
//   redlock          redlock 4.2.0, one instance, retryCount -1 (retry
//                    forever; the loop stops waiting at the end instant),
//                    default retryDelay/retryJitter; lock TTL 10000 ms
//                    (redlock has no default TTL).
//   semaphore        redis-semaphore 5.8.0 Mutex with default options; an
//                    acquire that reaches the default 10 s acquireTimeout is
//                    retried; pending acquires are aborted at the end instant.
'use strict';

const fs = require('fs');
const Redis = require('ioredis');

const MAX_ITER = 64 * 1024 * 1024;
const MAX_RECORDS = 2 * 1024 * 1024;

function parseArgs(argv) {
  const o = { worker: 0, threads: 1, distinct: false, holdUs: 0 };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--peer': o.peer = v(); break;
      case '--url': o.url = v(); break;
      case '--name': o.name = v(); break;
      case '--hold-us': o.holdUs = Number(v()); break;
      case '--seconds': o.seconds = Number(v()); break;
      case '--start-ns': o.startNs = BigInt(v()); break;
      case '--worker': o.worker = Number(v()); break;
      case '--threads': o.threads = Number(v()); break;
      case '--distinct': o.distinct = true; break;
      case '--records': o.records = v(); break;
      default: throw new Error(`unknown argument ${a}`);
    }
  }
  if (!o.peer || !o.url || !o.name || !o.records || !(o.seconds > 0))
    throw new Error('needs --peer --url --name --seconds --records');
  if (!(o.threads >= 1 && o.threads <= 256)) throw new Error('bad --threads');
  return o;
}

const now = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resolves at instant t (ns): a timer to about 2 ms before, then a spin.
async function sleepUntil(t) {
  const ms = Number((t - now()) / 1000000n) - 2;
  if (ms > 0) await sleep(ms);
  for (let i = 0; i < 1e9 && now() < t; i++);
}

// One peer adapter: { acquire(name, deadlineNs) -> handle|null, release(h) }
function makePeer(kind, client) {
  if (kind === 'redlock') {
    const Redlock = require('redlock');
    const redlock = new Redlock([client], { retryCount: -1 });
    redlock.on('clientError', () => {});
    return {
      async acquire(name, endNs) {
        let timer;
        const ms = Math.max(1, Number((endNs - now()) / 1000000n));
        const end = new Promise((r) => { timer = setTimeout(() => r(null), ms); });
        const got = redlock.lock(name, 10000);
        got.catch(() => {});
        const h = await Promise.race([got, end]);
        clearTimeout(timer);
        return h;
      },
      async release(h) { await h.unlock(); },
    };
  }
  if (kind === 'semaphore') {
    const { Mutex } = require('redis-semaphore');
    return {
      async acquire(name, endNs) {
        for (let attempt = 0; attempt < 1000; attempt++) {
          const ms = Number((endNs - now()) / 1000000n);
          if (ms <= 0) return null;
          const abort = new AbortController();
          const timer = setTimeout(() => abort.abort(), ms);
          const m = new Mutex(client, name);
          try {
            await m.acquire(abort.signal);
            return m;
          } catch (e) {
            if (abort.signal.aborted) return null;
            if (!(e && e.name === 'TimeoutError')) throw e;
          } finally {
            clearTimeout(timer);
          }
        }
        return null;
      },
      async release(m) { await m.release(); },
    };
  }
  throw new Error(`unknown peer ${kind}`);
}

async function loop(peer, id, name, holdNs, startNs, endNs, recs) {
  await sleepUntil(startNs);
  for (let iter = 0; iter < MAX_ITER; iter++) {
    if (now() >= endNs) break;
    const h = await peer.acquire(name, endNs);
    if (!h) break; // the run ended while waiting
    const acq = now();
    let rel = acq;
    for (let spin = 0; rel - acq < holdNs && spin < 2e9; spin++) rel = now();
    await peer.release(h);
    if (recs.length >= MAX_RECORDS) break;
    recs.push(`${id},${acq},${rel}`);
  }
}

async function main() {
  const o = parseArgs(process.argv);
  const client = new Redis(o.url, { maxRetriesPerRequest: 3 });
  client.on('error', () => {});
  await client.ping();
  const peer = makePeer(o.peer, client);
  const startNs = o.startNs !== undefined ? o.startNs : now();
  const endNs = startNs + BigInt(Math.round(o.seconds * 1e9));
  const holdNs = BigInt(Math.round(o.holdUs * 1000));
  const late = now() - startNs;
  if (late > 0n)
    process.stderr.write(`node_worker ${o.worker}: reached the start instant ` +
      `${(Number(late) / 1e6).toFixed(1)} ms late\n`);
  const recs = [];
  const tasks = [];
  for (let t = 0; t < o.threads; t++) {
    const id = o.threads === 1 ? o.worker : o.worker * o.threads + t;
    const name = o.distinct ? `${o.name}:${id}` : o.name;
    tasks.push(loop(peer, id, name, holdNs, startNs, endNs, recs));
  }
  let failed = false;
  for (const r of await Promise.allSettled(tasks)) {
    if (r.status === 'rejected') {
      failed = true;
      process.stderr.write(`node_worker ${o.worker}: ${r.reason && r.reason.stack}\n`);
    }
  }
  fs.writeFileSync(o.records, 'worker,acquire_ns,release_ns\n' +
    recs.join('\n') + (recs.length ? '\n' : ''));
  client.disconnect();
  // pending retries (a redlock attempt after the end) must not keep us alive
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  process.stderr.write(`node_worker: ${e && e.stack ? e.stack : e}\n`);
  process.exit(2);
});
