package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RCountDownLatch;

/** RCountDownLatch against the library's dlock_latch_* (through the C helper). */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class CountDownLatchTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  private String channel() { return "redisson_countdownlatch__channel__{" + name + "}"; }

  @Test
  void dlockWaiterReleasedByRedissonCountDown() throws Exception {
    RCountDownLatch r = redisson().getCountDownLatch(name);
    Proc c = helper();
    assertEquals("ok set", c.cmd("latch-set " + name + " 2", 10_000));
    assertEquals(2, r.getCount(), "Redisson reads dlock's count");
    long before = redis().numsub(channel());
    c.send("latch-await " + name + " 10000");
    waitFor("dlock's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before));
    r.countDown();
    assertEquals(1, r.getCount());
    long t0 = System.nanoTime();
    r.countDown();
    assertEquals("ok", c.line(PROMPT_MS + 3000), "dlock's await returns at zero");
    assertTrue(ms(t0) < PROMPT_MS, "dlock's waiter released " + ms(t0) + " ms after Redisson's count-down");
    assertEquals("ok 0", c.cmd("latch-count " + name, 10_000));
  }

  @Test
  void redissonWaiterReleasedByDlockCountDown() throws Exception {
    RCountDownLatch r = redisson().getCountDownLatch(name);
    assertTrue(r.trySetCount(2));
    Proc c = helper();
    assertEquals("ok 2", c.cmd("latch-count " + name, 10_000), "dlock reads Redisson's count");
    assertEquals("ok unchanged", c.cmd("latch-set " + name + " 5", 10_000), "dlock does not reset a live latch");
    long before = redis().numsub(channel());
    long[] doneAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      boolean ok = r.await(20, TimeUnit.SECONDS);
      doneAt[0] = System.nanoTime();
      return ok;
    });
    waitFor("Redisson's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before));
    assertEquals("ok", c.cmd("latch-down " + name, 10_000));
    assertEquals(1, r.getCount());
    long t0 = System.nanoTime();
    assertEquals("ok", c.cmd("latch-down " + name, 10_000));
    assertTrue(f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS), "Redisson's await returns at zero");
    long waited = (doneAt[0] - t0) / 1_000_000L;
    assertTrue(waited < PROMPT_MS, "Redisson's waiter released " + waited + " ms after dlock's count-down");
  }
}
