package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.junit.jupiter.api.Test;

/**
 * Curator's InterProcessMultiLock (over InterProcessMutex paths) against
 * dlock's multilock (dlock_multilock_* over reentrant locks, the C helper's
 * `multi` verb) on overlapping sets of the same paths, taken in opposite
 * orders: each excludes the other on the shared paths, each is woken by the
 * other's release, and dlock's waiting multilock holds none of its paths
 * while it waits.
 */
class MultiLockTest extends Env {
  private String a() { return name + "-a"; }
  private String b() { return name + "-b"; }
  private String c() { return name + "-c"; }

  @Test
  void dlockHoldsCuratorMultiLockWaitsAndIsWoken() throws Exception {
    Proc h = helper();
    assertEquals("ok", h.cmd("multi " + a() + "," + b() + " 0", BOUND_MS));
    // Curator's set overlaps on b, in the other order
    InterProcessMultiLock m = new InterProcessMultiLock(curator(),
        List.of(BASE + c(), BASE + b()));
    assertFalse(m.acquire(200, TimeUnit.MILLISECONDS), "Curator's multilock got b, which dlock holds");
    InterProcessMutex onC = new InterProcessMutex(curator(), BASE + c());
    assertTrue(onC.acquire(5, TimeUnit.SECONDS), "Curator's failed multilock kept c");
    onC.release();
    CompletableFuture<Boolean> got = CompletableFuture.supplyAsync(() -> {
      try {
        return m.acquire(60, TimeUnit.SECONDS);
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
    Thread.sleep(300); // dlock still holds: Curator still waits
    assertFalse(got.isDone());
    assertEquals("ok", h.cmd("unmulti " + a() + "," + b(), BOUND_MS));
    assertTrue(got.get(BOUND_MS, TimeUnit.MILLISECONDS), "Curator not woken");
    // now dlock's set (b, a) is refused on b, and a stays free
    assertTrue(h.cmd("multi " + b() + "," + a() + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY"),
        "dlock's multilock got b, which Curator's multilock holds");
    assertEquals("ok", h.cmd("multi " + a() + " 0", BOUND_MS), "dlock's failed multilock kept a");
    assertEquals("ok", h.cmd("unmulti " + a(), BOUND_MS));
    // the pool thread that holds Curator's multilock never releases: the
    // client's close ends its session and its nodes
  }

  @Test
  void curatorHoldsDlockMultiLockWaitsHoldingNothing() throws Exception {
    InterProcessMultiLock m = new InterProcessMultiLock(curator(),
        List.of(BASE + a(), BASE + b()));
    assertTrue(m.acquire(5, TimeUnit.SECONDS));
    Proc h = helper();
    // dlock's set (b, c) overlaps on b: try once, then wait
    assertTrue(h.cmd("multi " + b() + "," + c() + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY"),
        "dlock's multilock got b, which Curator holds");
    h.send("multi " + b() + "," + c() + " 60000");
    assertNull(h.lineOrNull(500), "dlock's multilock got b, which Curator holds");
    // while it waits for b it holds nothing: Curator takes c at once
    InterProcessMutex onC = new InterProcessMutex(curator(), BASE + c());
    assertTrue(onC.acquire(0, TimeUnit.MILLISECONDS), "dlock's waiting multilock holds c");
    onC.release();
    m.release();
    assertEquals("ok", h.line(BOUND_MS), "dlock's multilock not woken");
    // dlock holds b and c: Curator's multilock over (c, a) is refused, and
    // its failure leaves a free
    InterProcessMultiLock m2 = new InterProcessMultiLock(curator(),
        List.of(BASE + c(), BASE + a()));
    assertFalse(m2.acquire(200, TimeUnit.MILLISECONDS), "Curator's multilock got c, which dlock holds");
    assertEquals("ok", h.cmd("multi " + a() + " 0", BOUND_MS), "a left held by Curator's failed multilock");
    assertEquals("ok", h.cmd("unmulti " + a(), BOUND_MS));
    assertEquals("ok", h.cmd("unmulti " + b() + "," + c(), BOUND_MS));
    assertTrue(m2.acquire(5, TimeUnit.SECONDS), "Curator's multilock after dlock released");
    m2.release();
  }
}
