package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;

/**
 * Mixed races, per kind: 2 Redisson threads (one client each) and 2 dlock
 * processes (dlock_interop's `count`) each add 1 to a counter file
 * THREADS x ITERS times under the kind, all at once. The total must be
 * exact (a lost update means two holders at once). Every increment also
 * appends "<who> <token>" to FILE.log (token 0 where the kind has none);
 * for RFencedLock the tokens must grow strictly in the order the
 * increments happened. How often the holder switched between Redisson and
 * dlock is printed, not asserted (it depends on scheduling). Bounded: 200
 * increments per kind, every wait 10 s, the whole class by @Timeout.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class MixedRaceTest extends Env {
  static final int ITERS = 50;
  private Path file;
  private ExecutorService pool;

  @BeforeEach
  void counter() throws Exception {
    file = Files.createTempFile("dlock-race-", ".count");
    Files.writeString(file, "0\n");
    pool = Executors.newFixedThreadPool(2);
  }

  @AfterEach
  void cleanup() throws Exception {
    pool.shutdownNow();
    Files.deleteIfExists(file);
    Files.deleteIfExists(Path.of(file + ".log"));
  }

  /** What one take got: the handle to give back, and a token or null. */
  record Held(Object handle, Long token) {}
  interface Take { Held take() throws Exception; }
  interface Give { void give(Held held) throws Exception; }

  /** Read, add one, rewrite: only correct when nobody else does it meanwhile. */
  private void bump() throws Exception {
    long v = Long.parseLong(Files.readString(file).trim());
    Files.writeString(file, (v + 1) + "\n");
  }

  private void log(long t) throws Exception {
    Files.writeString(Path.of(file + ".log"), "redisson " + t + "\n", StandardCharsets.UTF_8,
        java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
  }

  /**
   * Runs the race: 2 helpers `count KIND NAME ITERS FILE` and 2 threads,
   * each with its own Redisson client, doing take / bump / give ITERS
   * times.
   */
  private void race(String kind, java.util.function.Function<RedissonClient, Take> take, Give give)
      throws Exception {
    Proc d1 = helper(), d2 = helper();
    d1.cmd("id", 15_000); // connected
    d2.cmd("id", 15_000);
    List<Future<Integer>> fs = new ArrayList<>();
    Take[] tks = {take.apply(redisson()), take.apply(redisson())}; // connected first
    d1.send("count " + kind + " " + name + " " + ITERS + " " + file);
    d2.send("count " + kind + " " + name + " " + ITERS + " " + file);
    for (Take tk : tks) {
      fs.add(pool.submit(() -> {
        int n = 0;
        for (; n < ITERS; n++) {
          Held held = tk.take();
          assertTrue(held != null, kind + ": Redisson got nothing in 10 s");
          try {
            bump();
            log(held.token() == null ? 0 : held.token());
          } finally {
            give.give(held);
          }
        }
        return n;
      }));
    }
    for (Future<Integer> f : fs) assertEquals(ITERS, f.get(60, TimeUnit.SECONDS));
    assertEquals("ok " + ITERS, d1.line(60_000), kind + ": the first dlock process");
    assertEquals("ok " + ITERS, d2.line(60_000), kind + ": the second dlock process");
    assertEquals(4 * ITERS, Long.parseLong(Files.readString(file).trim()),
        kind + ": updates were lost, so two holders were in at once");
    List<String> log = Files.readAllLines(Path.of(file + ".log"));
    assertEquals(4 * ITERS, log.size(), "one log line per increment");
    int switches = 0;
    for (int i = 1; i < log.size(); i++)
      if (!log.get(i).split(" ")[0].equals(log.get(i - 1).split(" ")[0])) switches++;
    System.out.println("race " + kind + ": " + log.size() + " increments, the holder switched "
        + "between Redisson and dlock " + switches + " times");
  }

  private void tokensGrow() throws Exception {
    List<String> ts = Files.readAllLines(Path.of(file + ".log"));
    long last = 0;
    for (int i = 0; i < ts.size(); i++) {
      long t = Long.parseLong(ts.get(i).split(" ")[1]);
      assertTrue(t > last, "token " + t + " (increment " + (i + 1) + ") after " + last);
      last = t;
    }
  }

  @Test
  void rlock() throws Exception {
    race("lock", c -> {
      RLock l = c.getLock(name);
      return () -> l.tryLock(10, TimeUnit.SECONDS) ? new Held(l, null) : null;
    }, h -> ((RLock) h.handle()).unlock());
  }

  @Test
  void fairLock() throws Exception {
    race("fair", c -> {
      RLock l = c.getFairLock(name);
      return () -> l.tryLock(10, TimeUnit.SECONDS) ? new Held(l, null) : null;
    }, h -> ((RLock) h.handle()).unlock());
  }

  @Test
  void fencedLock() throws Exception {
    race("fenced", c -> {
      RFencedLock l = c.getFencedLock(name);
      // lockAndGetToken: Redisson 3.52.0's tryLockAndGetToken never
      // returns while the lock is held (FencedLockTest)
      return () -> new Held(l, l.lockAndGetToken());
    }, h -> ((RLock) h.handle()).unlock());
    tokensGrow();
  }

  @Test
  void writeLock() throws Exception {
    race("write", c -> {
      RLock l = c.getReadWriteLock(name).writeLock();
      return () -> l.tryLock(10, TimeUnit.SECONDS) ? new Held(l, null) : null;
    }, h -> ((RLock) h.handle()).unlock());
  }

  @Test
  void semaphore() throws Exception {
    assertTrue(redisson().getSemaphore(name).trySetPermits(1));
    race("sem", c -> {
      RSemaphore x = c.getSemaphore(name);
      return () -> x.tryAcquire(10, TimeUnit.SECONDS) ? new Held(x, null) : null;
    }, h -> ((RSemaphore) h.handle()).release());
  }

  @Test
  void permitSemaphore() throws Exception {
    assertTrue(redisson().getPermitExpirableSemaphore(name).trySetPermits(1));
    race("psem", c -> {
      RPermitExpirableSemaphore x = c.getPermitExpirableSemaphore(name);
      return () -> {
        String id = x.tryAcquire(10, 60, TimeUnit.SECONDS);
        return id == null ? null : new Held(new Object[] {x, id}, null);
      };
    }, h -> {
      Object[] p = (Object[]) h.handle();
      ((RPermitExpirableSemaphore) p[0]).release((String) p[1]);
    });
  }
}
