package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RFencedLock;

/** RFencedLock against an exclusive `dlock NAME` (whose DLOCK_TOKEN is the fenced lock's token). */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class FencedLockTest extends Env {

  @Test
  void tokensFromOneSequence() throws Exception {
    RFencedLock l = redisson().getFencedLock(name);
    List<String> order = new ArrayList<>();
    long last = 0;
    for (int round = 0; round < 3; round++) {
      Long t = l.lockAndGetToken();
      assertNotNull(t);
      assertTrue(t > last, "Redisson's token " + t + " after " + order);
      order.add("redisson " + t);
      last = t;
      l.unlock();

      Proc h = dlockHold(name);
      long d = h.awaitHeld(10_000);
      assertTrue(d > last, "dlock's DLOCK_TOKEN " + d + " after " + order);
      order.add("dlock " + d);
      last = d;
      h.closeStdin();
      assertEquals(0, h.waitExit(10_000));
    }
    Long t = l.tryLockAndGetToken();
    assertNotNull(t);
    assertTrue(t > last, "Redisson's token " + t + " after " + order);
    l.unlock();
  }

  @Test
  void exclusionAndHandOffKeepTheSequence() throws Exception {
    RFencedLock l = redisson().getFencedLock(name);
    Long t1 = l.lockAndGetToken();
    assertEquals(1, dlockRun(10_000, "-n", name, "true").status(), "dlock -n while Redisson holds the fenced lock");
    Proc w = start(DLOCK, "-w", "10", name, "sh", "-c", "echo \"got $DLOCK_TOKEN\"");
    waitFor("dlock's waiter queued", 10_000,
        io(() -> redis().num("ZCARD", "dlock_lock_queue:{" + name + "}") == 1));
    long t0 = System.nanoTime();
    l.unlock();
    String got = w.line(PROMPT_MS + 3000);
    assertTrue(ms(t0) < PROMPT_MS, "dlock's waiter woke " + ms(t0) + " ms after Redisson's unlock");
    long t2 = Long.parseLong(got.substring(4));
    assertTrue(t2 > t1, "dlock's token " + t2 + " after Redisson's " + t1);
    assertEquals(0, w.waitExit(10_000));

    Proc h = dlockHold(name);
    long t3 = h.awaitHeld(10_000);
    assertTrue(t3 > t2);
    // Not tryLockAndGetToken() here: in Redisson 3.52.0 it never returns
    // while the lock is held, by another Redisson client just the same
    // (tried: a second client's tryLockAndGetToken() and
    // tryLockAndGetToken(0, SECONDS) both still blocked after 3 s), so that
    // is Redisson's own behaviour, not a difference from dlock.
    assertTrue(l.isLocked(), "Redisson sees dlock's fenced hold");
    assertEquals(t3, l.getToken(), "Redisson's getToken() is dlock's DLOCK_TOKEN");
    h.closeStdin();
    assertEquals(0, h.waitExit(10_000));
    Long t4 = l.tryLockAndGetToken(5, TimeUnit.SECONDS);
    assertNotNull(t4);
    assertTrue(t4 > t3, "Redisson's token " + t4 + " after dlock's " + t3);
    l.unlock();
  }

  @Test
  void redissonHoldInDlockStatus() throws Exception {
    // `dlock --status` names Redisson's fenced holder by its own owner
    // (<client-id>:<java thread id>), with Redisson's token
    RFencedLock l = redisson().getFencedLock(name);
    Long t = l.lockAndGetToken();
    Status st = status(name);
    assertTrue(st.held(), "--status: held");
    assertEquals(1, st.owners().size(), st.raw());
    assertTrue(st.owners().get(0).endsWith(":" + Thread.currentThread().getId()),
        "owner " + st.owners().get(0) + " is <client-id>:<java thread id>");
    assertTrue(st.raw().contains("\"token\":" + t), "--status shows Redisson's token " + t + ": " + st.raw());
    l.unlock();
    assertFalse(status(name).held(), "--status: free after Redisson's unlock");
  }
}
