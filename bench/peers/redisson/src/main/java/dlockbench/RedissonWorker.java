/*
 * RedissonWorker - one worker of bench/compare's loop over Redisson's RLock.
 *
 *   java -cp ... dlockbench.RedissonWorker --url URL --name NAME
 *        --hold-us H --seconds D [--start-ns T] [--worker I]
 *        [--threads N [--distinct]] --records FILE
 *
 * The loop and records of every peer (bench/README.md): from the
 * CLOCK_MONOTONIC instant T (System.nanoTime() reads CLOCK_MONOTONIC on
 * Linux, as dlock-bench's clock_gettime does) until T + D: acquire, take
 * the time, busy-wait H us, take the time, release; one
 * `worker,acquire_ns,release_ns` line per pass. Threads are Java threads
 * sharing one RedissonClient, as an application would share it.
 *
 * Redisson with its defaults: one RedissonClient per process, single-server
 * config (its connection pool and pub/sub pool at their default sizes),
 * RLock.tryLock(time left in the run, ms) with no lease, so the watchdog
 * (30 s) keeps the lock, and unlock().
 *
 * Warm-up: before T every thread takes and releases its own lock
 * NAME:warmup:<id> in a loop (at most 20 000 passes, and never past T - 50
 * ms), so that the JIT has compiled the acquire and release paths and the
 * pools have connected before the measured window; those passes are not
 * recorded. A worker that reaches T late says so on stderr
 * ("start instant X ms late"), as the other workers do, and compare gives
 * the next run a longer lead.
 */
package dlockbench;

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class RedissonWorker {
  private static final int MAX_RECORDS = 2 * 1024 * 1024;
  private static final int WARMUP_MAX = 20_000;

  private String url, name, records;
  private long holdNs, startNs = -1;
  private double seconds;
  private int worker, threads = 1;
  private boolean distinct;

  private void parse(String[] a) {
    for (int i = 0; i < a.length; i++) {
      String k = a[i];
      if (k.equals("--distinct")) {
        distinct = true;
        continue;
      }
      if (i + 1 >= a.length)
        throw new IllegalArgumentException(k + " needs a value");
      String v = a[++i];
      switch (k) {
        case "--url": url = v; break;
        case "--name": name = v; break;
        case "--hold-us": holdNs = Math.round(Double.parseDouble(v) * 1000); break;
        case "--seconds": seconds = Double.parseDouble(v); break;
        case "--start-ns": startNs = Long.parseLong(v); break;
        case "--worker": worker = Integer.parseInt(v); break;
        case "--threads": threads = Integer.parseInt(v); break;
        case "--records": records = v; break;
        default: throw new IllegalArgumentException("unknown argument " + k);
      }
    }
    if (url == null || name == null || records == null || !(seconds > 0))
      throw new IllegalArgumentException("needs --url --name --seconds --records");
    if (threads < 1 || threads > 256)
      throw new IllegalArgumentException("bad --threads");
  }

  private static void sleepUntil(long t) throws InterruptedException {
    long ms = (t - System.nanoTime()) / 1_000_000 - 2;
    if (ms > 0)
      Thread.sleep(ms);
    for (long i = 0; i < 2_000_000_000L && System.nanoTime() < t; i++)
      Thread.onSpinWait();
  }

  private void loop(RedissonClient r, int id, long endNs, List<String> out)
      throws InterruptedException {
    RLock warm = r.getLock(name + ":warmup:" + id);
    for (int i = 0; i < WARMUP_MAX && System.nanoTime() < startNs - 50_000_000L; i++) {
      if (warm.tryLock(1000, TimeUnit.MILLISECONDS))
        warm.unlock();
    }
    RLock lock = r.getLock(distinct ? name + ":" + id : name);
    List<String> recs = new ArrayList<>();
    sleepUntil(startNs);
    while (System.nanoTime() < endNs && recs.size() < MAX_RECORDS) {
      long leftMs = (endNs - System.nanoTime()) / 1_000_000;
      if (leftMs <= 0 || !lock.tryLock(leftMs, TimeUnit.MILLISECONDS))
        break; // the run ended while waiting
      long acq = System.nanoTime(), rel = acq;
      for (long spin = 0; rel - acq < holdNs && spin < 2_000_000_000L; spin++)
        rel = System.nanoTime();
      lock.unlock();
      recs.add(id + "," + acq + "," + rel);
    }
    synchronized (out) {
      out.addAll(recs);
    }
  }

  private int run() throws Exception {
    Config cfg = new Config();
    cfg.useSingleServer().setAddress(url);
    RedissonClient r = Redisson.create(cfg);
    try {
      if (startNs < 0)
        startNs = System.nanoTime() + 500_000_000L;
      long endNs = startNs + Math.round(seconds * 1e9);
      List<String> out = new ArrayList<>();
      List<Thread> ts = new ArrayList<>();
      List<Throwable> errors = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int id = threads == 1 ? worker : worker * threads + t;
        Thread th = new Thread(() -> {
          try {
            loop(r, id, endNs, out);
          } catch (Throwable e) {
            synchronized (errors) {
              errors.add(e);
            }
          }
        });
        ts.add(th);
        th.start();
      }
      // the late check runs once every thread has warmed up and waits for T
      sleepUntil(startNs);
      long late = System.nanoTime() - startNs;
      if (late > 1_000_000L)
        System.err.printf("redisson_worker %d: reached the start instant %.1f ms late%n",
            worker, late / 1e6);
      for (Thread th : ts)
        th.join();
      try (BufferedWriter w = new BufferedWriter(new FileWriter(records))) {
        w.write("worker,acquire_ns,release_ns\n");
        for (String s : out) {
          w.write(s);
          w.write('\n');
        }
      }
      for (Throwable e : errors)
        System.err.println("redisson_worker " + worker + ": " + e);
      return errors.isEmpty() ? 0 : 1;
    } finally {
      r.shutdown(0, 2, TimeUnit.SECONDS);
    }
  }

  public static void main(String[] args) {
    int code;
    try {
      RedissonWorker w = new RedissonWorker();
      w.parse(args);
      code = w.run();
    } catch (Throwable e) {
      System.err.println("redisson_worker: " + e);
      code = 2;
    }
    System.exit(code);
  }
}
