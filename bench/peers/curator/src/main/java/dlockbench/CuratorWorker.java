/*
 * CuratorWorker - one worker of the benchmark loop over Apache Curator's
 * InterProcessMutex (bench/zk-compare).
 *
 *   java -cp ... dlockbench.CuratorWorker --url URL --name NAME
 *        --hold-us H --seconds D [--start-ns T] [--worker I]
 *        [--threads N [--distinct]] --records FILE
 *
 * URL is zookeeper://host:port[,host:port...] (zk:// too), the ensemble
 * dlock-bench is given. NAME is the lock's path when it starts with '/',
 * else a path under /dlock/locks, as dlock maps names (docs/ZOOKEEPER.md),
 * so the same NAME is the same lock for both.
 *
 * The loop and records of every peer (bench/README.md): from the
 * CLOCK_MONOTONIC instant T (System.nanoTime() reads CLOCK_MONOTONIC on
 * Linux, as dlock-bench's clock_gettime does) until T + D: acquire, take
 * the time, busy-wait H us, take the time, release; one
 * `worker,acquire_ns,release_ns` line per pass. Threads are Java threads
 * sharing one CuratorFramework, each with its own InterProcessMutex.
 *
 * Curator with its defaults: CuratorFrameworkFactory.newClient(hosts,
 * retry policy) (60 s session, 15 s connection timeout), an
 * ExponentialBackoffRetry(1000 ms, 3) as Curator's documentation shows,
 * InterProcessMutex.acquire(time left in the run, ms) and release().
 *
 * Warm-up: before T every thread takes and releases its own lock
 * NAME-warmup-<id> in a loop (at most 20 000 passes, and never past T - 50
 * ms), so that the JIT has compiled the acquire and release paths and the
 * session is up before the measured window; those passes are not recorded.
 * A worker that reaches T late says so on stderr ("start instant X ms
 * late"), as the other workers do.
 */
package dlockbench;

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorWorker {
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

  /* zookeeper://h:p,h:p[/chroot] -> h:p,h:p[/chroot] (Curator's form). */
  private static String connectString(String url) {
    String rest;
    if (url.startsWith("zookeeper://"))
      rest = url.substring("zookeeper://".length());
    else if (url.startsWith("zk://"))
      rest = url.substring("zk://".length());
    else
      throw new IllegalArgumentException("--url must be zookeeper://...");
    int q = rest.indexOf('?');
    return q < 0 ? rest : rest.substring(0, q);
  }

  private String path(String n) {
    return n.startsWith("/") ? n : "/dlock/locks/" + n;
  }

  private static void sleepUntil(long t) throws InterruptedException {
    long ms = (t - System.nanoTime()) / 1_000_000 - 2;
    if (ms > 0)
      Thread.sleep(ms);
    for (long i = 0; i < 2_000_000_000L && System.nanoTime() < t; i++)
      Thread.onSpinWait();
  }

  private void loop(CuratorFramework c, int id, long endNs, List<String> out)
      throws Exception {
    InterProcessMutex warm = new InterProcessMutex(c, path(name + "-warmup-" + id));
    for (int i = 0; i < WARMUP_MAX && System.nanoTime() < startNs - 50_000_000L; i++) {
      if (warm.acquire(1000, TimeUnit.MILLISECONDS))
        warm.release();
    }
    // a create or delete that the server is slow to answer is not bounded
    // by acquire's wait (Curator retries it): say so when it ate the window
    long over = System.nanoTime() - startNs;
    if (over > 1_000_000L)
      System.err.printf("curator_worker %d: warm-up overran the start instant by %.1f ms%n",
          id, over / 1e6);
    InterProcessMutex lock =
        new InterProcessMutex(c, path(distinct ? name + ":" + id : name));
    List<String> recs = new ArrayList<>();
    sleepUntil(startNs);
    while (System.nanoTime() < endNs && recs.size() < MAX_RECORDS) {
      long leftMs = (endNs - System.nanoTime()) / 1_000_000;
      if (leftMs <= 0 || !lock.acquire(leftMs, TimeUnit.MILLISECONDS))
        break; // the run ended while waiting
      long acq = System.nanoTime(), rel = acq;
      for (long spin = 0; rel - acq < holdNs && spin < 2_000_000_000L; spin++)
        rel = System.nanoTime();
      lock.release();
      recs.add(id + "," + acq + "," + rel);
    }
    synchronized (out) {
      out.addAll(recs);
    }
  }

  private int run() throws Exception {
    CuratorFramework c = CuratorFrameworkFactory.newClient(
        connectString(url), new ExponentialBackoffRetry(1000, 3));
    c.start();
    try {
      if (!c.blockUntilConnected(15, TimeUnit.SECONDS))
        throw new IllegalStateException("no ZooKeeper session within 15 s");
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
            loop(c, id, endNs, out);
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
        System.err.printf("curator_worker %d: reached the start instant %.1f ms late%n",
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
        System.err.println("curator_worker " + worker + ": " + e);
      return errors.isEmpty() ? 0 : 1;
    } finally {
      c.close();
    }
  }

  public static void main(String[] args) {
    int code;
    try {
      CuratorWorker w = new CuratorWorker();
      w.parse(args);
      code = w.run();
    } catch (Throwable e) {
      System.err.println("curator_worker: " + e);
      code = 2;
    }
    System.exit(code);
  }
}
