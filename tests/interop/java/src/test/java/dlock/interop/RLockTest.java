package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * RLock (reentrant) against an exclusive `dlock NAME` (which holds the
 * fenced lock NAME: Redisson's lock hash, so RLock sees it as a lock).
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class RLockTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  private String channel() { return "redisson_lock__channel:{" + name + "}"; }

  @Test
  void dlockHolderExcludesRedisson() throws Exception {
    RLock l = redisson().getLock(name);
    Proc h = dlockHold(name);
    h.awaitHeld(10_000);
    assertTrue(l.isLocked(), "Redisson sees dlock's hold");
    assertFalse(l.tryLock(0, TimeUnit.SECONDS), "Redisson's tryLock(0) while dlock holds");
    assertFalse(l.tryLock(), "Redisson's tryLock() while dlock holds");
    h.closeStdin();
    assertEquals(0, h.waitExit(10_000));
    assertFalse(l.isLocked(), "free after dlock exits");
    assertTrue(l.tryLock(0, TimeUnit.SECONDS), "Redisson gets it once dlock exits");
    l.unlock();
  }

  @Test
  void redissonHolderExcludesDlock() throws Exception {
    RLock l = redisson().getLock(name);
    l.lock();
    assertEquals(1, dlockRun(10_000, "-n", name, "true").status(), "dlock -n while Redisson holds");
    assertEquals(1, dlockRun(10_000, "-w", "0.3", name, "true").status(), "dlock -w 0.3 while Redisson holds");
    l.unlock();
    assertEquals(0, dlockRun(10_000, "-n", name, "true").status(), "dlock -n once Redisson unlocked");
  }

  /** A Redisson waiter (tryLock with a wait, or lock()) wakes when the dlock holder exits. */
  private void redissonWaiterWakes(boolean useLock) throws Exception {
    RLock l = redisson().getLock(name);
    Proc h = dlockHold(name);
    h.awaitHeld(10_000);
    long before = redis().numsub(channel());
    long[] gotAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      boolean ok = true;
      if (useLock) l.lock();
      else ok = l.tryLock(20, TimeUnit.SECONDS);
      gotAt[0] = System.nanoTime();
      if (ok) l.unlock();
      return ok;
    });
    waitFor("Redisson's waiter subscribed", 10_000, io(() -> redis().numsub(channel()) > before));
    long t0 = System.nanoTime();
    h.closeStdin();
    assertTrue(f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS), "Redisson's waiter got the lock");
    long waited = (gotAt[0] - t0) / 1_000_000L;
    assertTrue(waited < PROMPT_MS, "Redisson's waiter got it " + waited + " ms after dlock's release");
    assertEquals(0, h.waitExit(10_000));
  }

  @Test
  void redissonTryLockWaiterWokenByDlockRelease() throws Exception { redissonWaiterWakes(false); }

  @Test
  void redissonLockWaiterWokenByDlockRelease() throws Exception { redissonWaiterWakes(true); }

  @Test
  void dlockWaiterWokenByRedissonUnlock() throws Exception {
    RLock l = redisson().getLock(name);
    l.lock();
    Proc w = start(DLOCK, "-w", "10", name, "sh", "-c", "echo got");
    waitFor("dlock's waiter queued", 10_000,
        io(() -> redis().num("ZCARD", "dlock_lock_queue:{" + name + "}") == 1));
    long t0 = System.nanoTime();
    l.unlock();
    assertEquals("got", w.line(PROMPT_MS + 3000));
    long waited = ms(t0);
    assertTrue(waited < PROMPT_MS, "dlock's waiter got it " + waited + " ms after Redisson's unlock");
    assertEquals(0, w.waitExit(10_000));
  }

  @Test
  void dlockHoldSeenByRedisson() throws Exception {
    RLock l = redisson().getLock(name);
    Proc h = dlockHold(name, "--watchdog", "1");
    h.awaitHeld(10_000);
    Status st = status(name);
    assertTrue(st.held());
    @SuppressWarnings("unchecked")
    List<Object> fields = (List<Object>) redis().call("HKEYS", name);
    assertEquals(fields, st.owners(), "--status holders are the hash's fields");
    assertEquals(List.of(1L), st.counts());
    assertTrue(st.raw().contains("\"who\":{\"host\":"), "--status --json: the dlock holder's identity in " + st.raw());
    // Redisson never reads dlock's holder key, and the lock hash holds the owner alone
    assertEquals(1L, redis().call("EXISTS", "dlock_holder:{" + name + "}:" + fields.get(0)),
        "dlock's holder identity beside the lock");
    assertTrue(l.isLocked(), "Redisson: isLocked");
    assertFalse(l.isHeldByCurrentThread(), "Redisson: not held by this thread");
    assertEquals(0, l.getHoldCount(), "Redisson: hold count of this thread");
    long ttl = l.remainTimeToLive();
    assertTrue(ttl > 0 && ttl <= 1000, "Redisson: remainTimeToLive " + ttl + " within dlock's 1 s lease");
    // Redisson's forceUnlock breaks dlock's hold; dlock notices at its next renewal.
    assertTrue(l.forceUnlock(), "Redisson: forceUnlock of dlock's hold");
    assertFalse(l.isLocked());
    assertEquals(75, h.waitExit(10_000), "dlock reports the lock lost (EX_TEMPFAIL)");
    assertFalse(status(name).held(), "--status: free after Redisson's forceUnlock");
  }

  @Test
  void redissonHoldSeenByDlock() throws Exception {
    RLock l = redisson().getLock(name);
    l.lock();
    l.lock();
    assertEquals(2, l.getHoldCount());
    Status st = status(name);
    assertTrue(st.held(), "--status: held");
    assertEquals(1, st.owners().size());
    assertTrue(st.owners().get(0).endsWith(":" + Thread.currentThread().getId()),
        "owner " + st.owners().get(0) + " is <client-id>:<java thread id>");
    assertEquals(List.of(2L), st.counts(), "--status: Redisson's hold count");
    assertTrue(st.raw().contains("\"info\":null,\"who\":null"),
        "--status --json: a Redisson holder records no identity: " + st.raw());
    assertTrue(st.leaseMs() > 0 && st.leaseMs() <= 30_000, "--status: lease " + st.leaseMs());
    Result fu = dlockRun(10_000, "--force-unlock", name);
    assertEquals(0, fu.status());
    assertTrue(fu.out().contains("unlocked"), fu.out());
    assertFalse(l.isLocked(), "Redisson: free after dlock --force-unlock");
    assertFalse(l.isHeldByCurrentThread());
    assertEquals(0, dlockRun(10_000, "-n", name, "true").status());
  }

  @Test
  void dlockWatchdogKeepsRedissonOut() throws Exception {
    RLock l = redisson().getLock(name);
    Proc h = dlockHold(name, "--watchdog", "1");
    h.awaitHeld(10_000);
    long t0 = System.nanoTime();
    assertFalse(l.tryLock(3500, TimeUnit.MILLISECONDS), "Redisson waited 3.5 leases in vain");
    assertTrue(ms(t0) >= 3400);
    long pttl = redis().num("PTTL", name);
    assertTrue(pttl > 0 && pttl <= 1000, "dlock's lease still renewed: PTTL " + pttl);
    h.closeStdin();
    assertEquals(0, h.waitExit(10_000));
    assertTrue(l.tryLock(0, TimeUnit.SECONDS));
    l.unlock();
  }

  @Test
  void redissonWatchdogKeepsDlockOut() throws Exception {
    RedissonClient r = redisson(1000);
    RLock l = r.getLock(name);
    l.lock();
    long t0 = System.nanoTime();
    assertEquals(1, dlockRun(15_000, "-w", "3.5", name, "true").status(), "dlock -w 3.5 ran out");
    assertTrue(ms(t0) >= 3400);
    long pttl = redis().num("PTTL", name);
    assertTrue(pttl > 0 && pttl <= 1000, "Redisson's 1 s lease still renewed: PTTL " + pttl);
    assertTrue(l.isHeldByCurrentThread());
    l.unlock();
    assertEquals(0, dlockRun(10_000, "-n", name, "true").status());
  }
}
