package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.junit.jupiter.api.Test;

/**
 * Curator's InterProcessMutex on /dlock/locks/NAME against the dlock
 * command's exclusive lock NAME (the fenced lock NAME, same layout):
 * exclusion both ways, wake-ups both ways (every wait is 60 s, so only a
 * watch can serve it within the bound), and tokens that keep growing
 * whoever held in between.
 */
class MutexTest extends Env {
  @Test
  void curatorHoldsDlockIsRefused() throws Exception {
    InterProcessMutex m = new InterProcessMutex(curator(), BASE + name);
    assertTrue(m.acquire(5, TimeUnit.SECONDS));
    assertEquals(1, dlockRun("-n", name, "true"), "dlock -n while Curator holds");
    assertEquals(0, dlockRun("--status", name), "--status sees Curator's holder");
    String js = dlockOut("--status", "--json", name);
    assertTrue(js.contains("\"owner\":\"session 0x") && js.contains("\"info\":null,\"who\":null"),
        "--status --json: Curator's holder by its session, with no identity: " + js);
    m.release();
    assertEquals(0, dlockRun("-n", name, "true"));
    assertEquals(1, dlockRun("--status", name));
  }

  @Test
  void dlockHoldsCuratorWaitsAndIsWoken() throws Exception {
    Proc d = dlockHold(name);
    d.awaitHeld(BOUND_MS);
    // the node's data is the owner, then dlock's identity: Curator reads
    // none of it (it waits and is woken all the same)
    String js = dlockOut("--status", "--json", name);
    assertTrue(js.contains("\"who\":{\"host\":"), "--status --json: dlock's identity: " + js);
    InterProcessMutex m = new InterProcessMutex(curator(), BASE + name);
    assertFalse(m.acquire(0, TimeUnit.MILLISECONDS), "Curator got a lock dlock holds");
    CompletableFuture<Boolean> got = CompletableFuture.supplyAsync(() -> {
      try {
        return m.acquire(60, TimeUnit.SECONDS);
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
    assertNull(d.lineOrNull(300)); // still holding, Curator still waiting
    assertFalse(got.isDone());
    d.closeStdin(); // the command ends: dlock releases
    assertTrue(got.get(BOUND_MS, TimeUnit.MILLISECONDS), "Curator not woken");
    assertEquals(0, d.waitExit(BOUND_MS));
    // the pool thread that holds it never releases: closing the client
    // ends its session, and the node with it
  }

  @Test
  void curatorHoldsDlockWaitsAndIsWoken() throws Exception {
    InterProcessMutex m = new InterProcessMutex(curator(), BASE + name);
    assertTrue(m.acquire(5, TimeUnit.SECONDS));
    Proc d = dlockHold(name, "-w", "60");
    assertNull(d.lineOrNull(500), "dlock got a lock Curator holds");
    m.release();
    long token = d.awaitHeld(BOUND_MS);
    assertTrue(token > 0, "no token");
    d.closeStdin();
    assertEquals(0, d.waitExit(BOUND_MS));
  }

  @Test
  void tokensGrowAcrossCuratorHolders() throws Exception {
    Proc d1 = dlockHold(name);
    long t1 = d1.awaitHeld(BOUND_MS);
    d1.closeStdin();
    assertEquals(0, d1.waitExit(BOUND_MS));
    InterProcessMutex m = new InterProcessMutex(curator(), BASE + name);
    assertTrue(m.acquire(5, TimeUnit.SECONDS));
    m.release();
    Proc d2 = dlockHold(name);
    long t2 = d2.awaitHeld(BOUND_MS);
    assertTrue(t2 > t1, "token " + t2 + " after " + t1);
    d2.closeStdin();
    assertEquals(0, d2.waitExit(BOUND_MS));
  }
}
