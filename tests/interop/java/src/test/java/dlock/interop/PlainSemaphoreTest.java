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
import org.redisson.api.RSemaphore;

/** RSemaphore against the library's dlock_semaphore_* (through the C helper). */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class PlainSemaphoreTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  private String channel() { return "redisson_sc:{" + name + "}"; }

  @Test
  void permitsAreOneCountForBoth() throws Exception {
    RSemaphore r = redisson().getSemaphore(name);
    Proc c = helper();
    assertEquals("ok set", c.cmd("sem-set " + name + " 2", 10_000));
    assertFalse(r.trySetPermits(5), "Redisson sees dlock's semaphore as set");
    assertEquals(2, r.availablePermits());
    assertEquals("ok", c.cmd("sem-acquire " + name + " 0", 10_000));
    assertEquals(1, r.availablePermits(), "Redisson counts dlock's permit");
    assertTrue(r.tryAcquire(), "Redisson takes the second permit");
    assertEquals("ok 0", c.cmd("sem-avail " + name, 10_000), "dlock counts Redisson's permit");
    assertEquals("err DLOCK_EBUSY", c.cmd("sem-acquire " + name + " 0", 10_000).replaceAll("(err DLOCK_EBUSY).*", "$1"),
        "no third permit for dlock");
    assertFalse(r.tryAcquire(), "no third permit for Redisson");
    r.release();
    assertEquals("ok", c.cmd("sem-release " + name, 10_000));
    assertEquals(2, r.availablePermits());
  }

  @Test
  void dlockWaiterWokenByRedissonRelease() throws Exception {
    RSemaphore r = redisson().getSemaphore(name);
    assertTrue(r.trySetPermits(1));
    assertTrue(r.tryAcquire());
    Proc c = helper();
    long before = redis().numsub(channel());
    c.send("sem-acquire " + name + " 10000");
    waitFor("dlock's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before));
    long t0 = System.nanoTime();
    r.release();
    assertEquals("ok", c.line(PROMPT_MS + 3000), "dlock's waiter gets the permit");
    assertTrue(ms(t0) < PROMPT_MS, "dlock's waiter woken " + ms(t0) + " ms after Redisson's release");
    assertEquals(0, r.availablePermits());
    assertEquals("ok", c.cmd("sem-release " + name, 10_000));
  }

  @Test
  void redissonWaiterWokenByDlockRelease() throws Exception {
    RSemaphore r = redisson().getSemaphore(name);
    Proc c = helper();
    assertEquals("ok set", c.cmd("sem-set " + name + " 1", 10_000));
    assertEquals("ok", c.cmd("sem-acquire " + name + " 0", 10_000));
    long before = redis().numsub(channel());
    long[] doneAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      boolean ok = r.tryAcquire(20, TimeUnit.SECONDS);
      doneAt[0] = System.nanoTime();
      return ok;
    });
    waitFor("Redisson's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before));
    long t0 = System.nanoTime();
    assertEquals("ok", c.cmd("sem-release " + name, 10_000));
    assertTrue(f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS), "Redisson's waiter gets the permit");
    long waited = (doneAt[0] - t0) / 1_000_000L;
    assertTrue(waited < PROMPT_MS, "Redisson's waiter woken " + waited + " ms after dlock's release");
    assertEquals("ok 0", c.cmd("sem-avail " + name, 10_000));
    r.release();
  }
}
