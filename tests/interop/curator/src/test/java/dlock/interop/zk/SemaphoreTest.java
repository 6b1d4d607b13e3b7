package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.junit.jupiter.api.Test;

/**
 * Curator's InterProcessSemaphoreV2 (maxLeases 2) on /dlock/locks/NAME
 * against `dlock -N 2 NAME`: leases of either count against the other,
 * and a dlock holder waiting for a permit is woken by Curator's return.
 * A queued Curator waiter (its lease node kept while it waits) is a
 * waiter for dlock too, not a holder. A Curator lease is a dlock permit:
 * `--status` lists it by the UUID of its node, and dlock releases it by
 * that id.
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

  @Test
  void queuedCuratorWaiterIsNoHolder() throws Exception {
    assertEquals(0, dlockRun("-N", "1", "-n", name, "true"), "dlock made the 1-permit semaphore");
    InterProcessSemaphoreV2 s1 = new InterProcessSemaphoreV2(curator(), BASE + name, 1);
    InterProcessSemaphoreV2 s2 = new InterProcessSemaphoreV2(curator(), BASE + name, 1);
    Lease held = s1.acquire(5, TimeUnit.SECONDS);
    assertNotNull(held);
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try {
      Future<Lease> waiter = pool.submit(() -> s2.acquire(60, TimeUnit.SECONDS));
      CuratorFramework look = curator();
      String leases = BASE + name + "/leases";
      long end = System.nanoTime() + BOUND_MS * 1_000_000L;
      while (look.getChildren().forPath(leases).size() < 2 && System.nanoTime() < end)
        Thread.sleep(10);
      assertEquals(2, look.getChildren().forPath(leases).size(), "Curator's waiter made its lease node");

      // one holder, one waiter: busy for dlock (1), not a 2-permit semaphore (64)
      assertEquals(1, dlockRun("-N", "1", "-n", name, "true"), "dlock -N 1 -n");
      assertEquals(1, dlockRun("-N", "1", "-w", "2", name, "true"), "dlock -N 1 -w 2");
      String st = dlockOut("-N", "1", "--status", name);
      assertTrue(st.contains("permits: 0 free, 1 in use, 1 waiting"), st);

      // a dlock waiter queued behind Curator's: Curator's gets the permit
      // first (its node is there), dlock's when Curator's returns it
      Proc w = dlockHold(name, "-N", "1", "-w", "60");
      s1.returnLease(held);
      Lease second = waiter.get(BOUND_MS, TimeUnit.MILLISECONDS);
      assertNotNull(second, "Curator's waiter got the permit");
      st = dlockOut("-N", "1", "--status", name);
      assertTrue(st.contains("permits: 0 free, 1 in use") && !st.contains("waiting"), st);
      assertTrue(w.alive(), "dlock's waiter still waits");
      s2.returnLease(second);
      w.awaitHeld(BOUND_MS);
      w.closeStdin();
      assertEquals(0, w.waitExit(BOUND_MS));
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void curatorWaiterQueuedBehindDlock() throws Exception {
    Proc d = dlockHold(name, "-N", "1");
    d.awaitHeld(BOUND_MS);
    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(curator(), BASE + name, 1);
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try {
      Future<Lease> waiter = pool.submit(() -> s.acquire(60, TimeUnit.SECONDS));
      CuratorFramework look = curator();
      String leases = BASE + name + "/leases";
      long end = System.nanoTime() + BOUND_MS * 1_000_000L;
      while (look.getChildren().forPath(leases).size() < 2 && System.nanoTime() < end)
        Thread.sleep(10);
      assertEquals(2, look.getChildren().forPath(leases).size(), "Curator's waiter made its lease node");
      String st = dlockOut("-N", "1", "--status", name);
      assertTrue(st.contains("permits: 0 free, 1 in use, 1 waiting"), st);
      assertEquals(1, dlockRun("-N", "1", "-n", name, "true"), "dlock -N 1 -n while dlock holds");
      d.closeStdin(); // dlock's release hands the permit to Curator's waiter
      assertEquals(0, d.waitExit(BOUND_MS));
      Lease got = waiter.get(BOUND_MS, TimeUnit.MILLISECONDS);
      assertNotNull(got, "Curator's waiter got the permit dlock released");
      st = dlockOut("-N", "1", "--status", name);
      assertTrue(st.contains("permits: 0 free, 1 in use") && !st.contains("waiting"), st);
      s.returnLease(got);
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void curatorLeaseReleasedByDlock() throws Exception {
    String path = BASE + name;
    Proc d = helper();
    assertEquals("ok set", d.cmd("psem-set " + path + " 2", BOUND_MS));
    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(curator(), path, 2);
    Lease lease = s.acquire(5, TimeUnit.SECONDS);
    assertNotNull(lease);
    // the permit id is the UUID of the protected node's name, as 32 hex
    // digits (docs/ZOOKEEPER.md)
    java.util.regex.Matcher m = java.util.regex.Pattern
        .compile("^_c_([0-9a-f-]{36})-lease-[0-9]{10}$").matcher(lease.getNodeName());
    assertTrue(m.matches(), "Curator's lease node " + lease.getNodeName());
    String id = m.group(1).replace("-", "");
    String st = dlockOut("-N", "2", "--status", name);
    assertTrue(st.contains("1 free, 1 in use"), st);
    assertTrue(st.contains("permit " + id), "--status lists Curator's lease by its UUID " + id + ":\n" + st);
    assertEquals("ok", d.cmd("psem-release " + path + " " + id, BOUND_MS),
        "dlock releases Curator's lease by its id");
    CuratorFramework look = curator();
    assertEquals(0, look.getChildren().forPath(path + "/leases").size(), "the lease node is gone");
    st = dlockOut("-N", "2", "--status", name);
    assertTrue(st.contains("2 free, 0 in use"), st);
    s.returnLease(lease); // Curator's return of a lease already gone is quiet
    Lease again = s.acquire(5, TimeUnit.SECONDS);
    assertNotNull(again, "the permit came back for Curator");
    s.returnLease(again);
  }
}
