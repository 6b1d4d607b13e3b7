package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RPermitExpirableSemaphore;

/** RPermitExpirableSemaphore against `dlock -N LIMIT NAME` (the permit semaphore NAME). */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class SemaphoreTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  private String channel() { return "redisson_sc:{" + name + "}"; }

  @Test
  void boundHoldsAcrossBothAndReleasesWake() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    Proc h1 = dlockHold(name, "-N", "2");
    h1.awaitHeld(10_000);
    Proc h2 = dlockHold(name, "-N", "2");
    h2.awaitHeld(10_000);
    assertEquals(0, s.availablePermits(), "Redisson: both permits taken by dlock");
    assertNull(s.tryAcquire(), "Redisson: no third permit");

    // A Redisson waiter gets the permit a dlock holder gives back.
    long before = redis().numsub(channel());
    long[] gotAt = new long[1];
    Future<String> f = pool.submit(() -> {
      String id = s.tryAcquire(20, TimeUnit.SECONDS);
      gotAt[0] = System.nanoTime();
      return id;
    });
    waitFor("Redisson's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before));
    long t0 = System.nanoTime();
    h1.closeStdin();
    String id = f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS);
    assertNotNull(id, "Redisson's waiter got a permit");
    long waited = (gotAt[0] - t0) / 1_000_000L;
    assertTrue(waited < PROMPT_MS, "Redisson's waiter got it " + waited + " ms after dlock's release");
    assertEquals(0, h1.waitExit(10_000));

    // One dlock, one Redisson: a third holder of either kind is refused.
    assertEquals(1, dlockRun(10_000, "-n", "-N", "2", name, "true").status(), "dlock -n -N 2 with 2 permits out");
    assertNull(s.tryAcquire(), "Redisson: no third permit");

    // A dlock waiter gets the permit Redisson releases.
    long before2 = redis().numsub(channel());
    Proc w = start(DLOCK, "-w", "10", "-N", "2", name, "sh", "-c", "echo got");
    waitFor("dlock's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before2));
    t0 = System.nanoTime();
    s.release(id);
    assertEquals("got", w.line(PROMPT_MS + 3000));
    assertTrue(ms(t0) < PROMPT_MS, "dlock's waiter got it " + ms(t0) + " ms after Redisson's release");
    assertEquals(0, w.waitExit(10_000));
    h2.closeStdin();
    assertEquals(0, h2.waitExit(10_000));
    assertEquals(2, s.availablePermits());
  }

  @Test
  void redissonCreatedSemaphoreBoundsDlock() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    assertTrue(s.trySetPermits(2));
    String a = s.tryAcquire();
    String b = s.tryAcquire(0, 30, TimeUnit.SECONDS); // a lease of 30 s, as dlock's permits have
    assertNotNull(a);
    assertNotNull(b);
    assertEquals(1, dlockRun(10_000, "-n", "-N", "2", name, "true").status(), "dlock -n -N 2 with Redisson holding 2");
    s.release(a);
    assertEquals(0, dlockRun(10_000, "-n", "-N", "2", name, "true").status(), "dlock -n -N 2 with one permit free");
    assertEquals(1, s.availablePermits(), "dlock gave its permit back");
    s.release(b);
  }

  /**
   * `dlock -N 1 --watchdog 1` renews its permit's 1 s lease: a Redisson
   * tryAcquire waits 3.5 leases in vain. (Redisson's permits have a lease
   * the caller chooses and no watchdog; a Redisson permit with a long lease
   * keeps dlock out as any held permit does, shown above.)
   */
  @Test
  void dlockWatchdogKeepsRedissonOut() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    Proc h = dlockHold(name, "-N", "1", "--watchdog", "1");
    h.awaitHeld(10_000);
    long t0 = System.nanoTime();
    assertNull(s.tryAcquire(3500, TimeUnit.MILLISECONDS), "Redisson waited 3.5 leases in vain");
    assertTrue(ms(t0) >= 3400);
    h.closeStdin();
    assertEquals(0, h.waitExit(10_000));
    String id = s.tryAcquire(5, TimeUnit.SECONDS);
    assertNotNull(id, "Redisson gets the permit once dlock exits");
    s.release(id);
  }
}
