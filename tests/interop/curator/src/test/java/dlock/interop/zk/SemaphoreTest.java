package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.junit.jupiter.api.Test;

/**
 * Curator's InterProcessSemaphoreV2 (maxLeases 2) on /dlock/locks/NAME
 * against `dlock -N 2 NAME`: leases of either count against the other,
 * and a dlock holder waiting for a permit is woken by Curator's return.
 */
class SemaphoreTest extends Env {
  @Test
  void permitsCountAcrossBoth() throws Exception {
    CuratorFramework c = curator();
    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, BASE + name, 2);
    Proc d = dlockHold(name, "-N", "2");
    d.awaitHeld(BOUND_MS);
    Lease one = s.acquire(5, TimeUnit.SECONDS);
    assertNotNull(one, "Curator found no lease with one of two in dlock's hands");
    assertNull(s.acquire(0, TimeUnit.MILLISECONDS), "a third lease of two");
    assertEquals(1, dlockRun("-N", "2", "-n", name, "true"), "dlock took a third permit");
    Proc w = dlockHold(name, "-N", "2", "-w", "60");
    assertNull(w.lineOrNull(500), "dlock took a third permit while waiting");
    s.returnLease(one);
    w.awaitHeld(BOUND_MS); // woken by Curator's return
    w.closeStdin();
    d.closeStdin();
    assertEquals(0, w.waitExit(BOUND_MS));
    assertEquals(0, d.waitExit(BOUND_MS));
  }
}
