package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RLock;

/** RFairLock against `dlock -F NAME`. */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class FairLockTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  private long queued() throws Exception { return redis().num("LLEN", "redisson_lock_queue:{" + name + "}"); }

  @Test
  void redissonWaiterWokenByDlockRelease() throws Exception {
    RLock l = redisson().getFairLock(name);
    Proc h = dlockHold(name, "-F");
    h.awaitHeld(10_000);
    assertTrue(l.isLocked());
    assertFalse(l.tryLock(), "Redisson's fair tryLock() while `dlock -F` holds");
    long[] gotAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      boolean ok = l.tryLock(20, TimeUnit.SECONDS);
      gotAt[0] = System.nanoTime();
      if (ok) l.unlock();
      return ok;
    });
    waitFor("Redisson's waiter queued", 10_000, io(() -> queued() == 1));
    long t0 = System.nanoTime();
    h.closeStdin();
    assertTrue(f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS));
    long waited = (gotAt[0] - t0) / 1_000_000L;
    assertTrue(waited < PROMPT_MS, "Redisson's fair waiter got it " + waited + " ms after dlock's release");
    assertEquals(0, h.waitExit(10_000));
  }

  @Test
  void dlockWaiterWokenByRedissonUnlock() throws Exception {
    RLock l = redisson().getFairLock(name);
    l.lock();
    assertEquals(1, dlockRun(10_000, "-n", "-F", name, "true").status(), "dlock -n -F while Redisson holds");
    Proc w = start(DLOCK, "-F", "-w", "10", name, "sh", "-c", "echo got");
    waitFor("dlock's waiter queued", 10_000, io(() -> queued() == 1));
    long t0 = System.nanoTime();
    l.unlock();
    assertEquals("got", w.line(PROMPT_MS + 3000));
    assertTrue(ms(t0) < PROMPT_MS, "dlock's fair waiter got it " + ms(t0) + " ms after Redisson's unlock");
    assertEquals(0, w.waitExit(10_000));
  }

  @Test
  void arrivalOrderAcrossBoth() throws Exception {
    RLock l = redisson().getFairLock(name);
    Proc h = dlockHold(name, "-F");
    h.awaitHeld(10_000);
    // queue: Redisson, then dlock
    long[] gotAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      boolean ok = l.tryLock(20, TimeUnit.SECONDS);
      gotAt[0] = System.nanoTime();
      return ok;
    });
    waitFor("Redisson's waiter queued", 10_000, io(() -> queued() == 1));
    Proc w = start(DLOCK, "-F", "-w", "20", name, "sh", "-c", "echo got");
    waitFor("dlock's waiter queued second", 10_000, io(() -> queued() == 2));
    h.closeStdin();
    assertTrue(f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS), "the first in line (Redisson) got it");
    assertTrue(w.alive(), "the second in line (dlock) still waits");
    assertEquals(1, dlockRun(10_000, "-n", "-F", name, "true").status());
    // Redisson's holder was taken in a pool thread: release it there.
    long t0 = System.nanoTime();
    pool.submit(() -> { l.unlock(); return null; }).get(10, TimeUnit.SECONDS);
    assertEquals("got", w.line(PROMPT_MS + 3000));
    assertTrue(ms(t0) < PROMPT_MS, "dlock's fair waiter got it " + ms(t0) + " ms after Redisson's unlock");
    assertEquals(0, w.waitExit(10_000));
  }

  /** `dlock -F --watchdog 1` renews its fair hold: Redisson's fair tryLock waits 3.5 leases in vain. */
  @Test
  void dlockWatchdogKeepsRedissonOut() throws Exception {
    RLock l = redisson().getFairLock(name);
    Proc h = dlockHold(name, "-F", "--watchdog", "1");
    h.awaitHeld(10_000);
    long t0 = System.nanoTime();
    assertFalse(l.tryLock(3500, TimeUnit.MILLISECONDS), "Redisson's fair lock waited 3.5 leases in vain");
    assertTrue(ms(t0) >= 3400);
    long pttl = redis().num("PTTL", name);
    assertTrue(pttl > 0 && pttl <= 1000, "dlock's lease still renewed: PTTL " + pttl);
    h.closeStdin();
    assertEquals(0, h.waitExit(10_000));
    assertTrue(l.tryLock(5, TimeUnit.SECONDS), "Redisson's fair lock once dlock exits");
    l.unlock();
  }

  /** Redisson's 1 s watchdog renews its fair hold: `dlock -F -w 3.5` runs out. */
  @Test
  void redissonWatchdogKeepsDlockOut() throws Exception {
    RLock l = redisson(1000).getFairLock(name);
    l.lock();
    long t0 = System.nanoTime();
    assertEquals(1, dlockRun(15_000, "-F", "-w", "3.5", name, "true").status(), "dlock -F -w 3.5 ran out");
    assertTrue(ms(t0) >= 3400);
    long pttl = redis().num("PTTL", name);
    assertTrue(pttl > 0 && pttl <= 1000, "Redisson's 1 s lease still renewed: PTTL " + pttl);
    l.unlock();
    assertEquals(0, dlockRun(15_000, "-F", "-w", "5", name, "true").status());
  }

  @Test
  void redissonQueueInDlockStatus() throws Exception {
    // `dlock --status` shows Redisson's fair holder and its queued waiter by
    // their own owners (<client-id>:<java thread id>), the waiter with its
    // place's deadline
    RLock l = redisson().getFairLock(name);
    RLock other = redisson().getFairLock(name);
    l.lock();
    long[] tid = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      tid[0] = Thread.currentThread().getId();
      boolean ok = other.tryLock(20, TimeUnit.SECONDS);
      if (ok) other.unlock();
      return ok;
    });
    waitFor("Redisson's waiter queued", 10_000, io(() -> queued() == 1));
    Status st = status("-F", name); // -F: the fair lock NAME
    assertTrue(st.held(), "--status: held");
    assertEquals("fair", st.kind(), st.raw());
    assertEquals(1, st.owners().size(), st.raw());
    assertTrue(st.owners().get(0).endsWith(":" + Thread.currentThread().getId()), st.raw());
    java.util.regex.Matcher w = java.util.regex.Pattern
        .compile("\"waiters\":\\[\"([^\"]*)\"\\]").matcher(st.raw());
    assertTrue(w.find(), "one waiter in " + st.raw());
    assertTrue(w.group(1).endsWith(":" + tid[0]), "the waiter " + w.group(1) + " is Redisson's thread " + tid[0]);
    assertTrue(st.raw().matches("(?s).*\"waiter_deadlines_ms\":\\[\\d+\\].*"), "its deadline: " + st.raw());
    l.unlock();
    assertTrue(f.get(20, TimeUnit.SECONDS), "Redisson's waiter got it");
  }
}
