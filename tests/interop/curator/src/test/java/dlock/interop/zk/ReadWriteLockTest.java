package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.junit.jupiter.api.Test;

/**
 * Curator's InterProcessReadWriteLock against dlock's read and write sides
 * (the C helper, on the same full path): readers share across both, a
 * writer of either excludes the other's readers and writers, and a dlock
 * writer waiting behind a Curator reader is woken by its release.
 */
class ReadWriteLockTest extends Env {
  @Test
  void sharedAndExclusiveBothWays() throws Exception {
    String path = "/it/" + name;
    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(curator(), path);
    Proc h = helper();
    assertTrue(rw.readLock().acquire(5, TimeUnit.SECONDS));
    assertEquals("ok", h.cmd("read " + path + " 0", BOUND_MS));
    assertTrue(h.cmd("write " + path + " 0", BOUND_MS).startsWith("err DLOCK_E"),
        "dlock wrote while readers held");
    rw.readLock().release();
    assertEquals("ok", h.cmd("unread " + path, BOUND_MS));
    assertEquals("ok", h.cmd("write " + path + " 0", BOUND_MS));
    assertFalse(rw.readLock().acquire(0, TimeUnit.MILLISECONDS), "Curator read under dlock's write");
    assertFalse(rw.writeLock().acquire(0, TimeUnit.MILLISECONDS), "Curator wrote under dlock's write");
    assertEquals("ok", h.cmd("unwrite " + path, BOUND_MS));
    assertTrue(rw.writeLock().acquire(5, TimeUnit.SECONDS));
    assertTrue(h.cmd("read " + path + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY"));
    rw.writeLock().release();
  }

  @Test
  void dlockWriterWokenByCuratorReader() throws Exception {
    String path = "/it/" + name;
    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(curator(), path);
    assertTrue(rw.readLock().acquire(5, TimeUnit.SECONDS));
    Proc h = helper();
    h.send("write " + path + " 60000");
    assertNull(h.lineOrNull(500), "dlock wrote while Curator read");
    rw.readLock().release();
    assertEquals("ok", h.line(BOUND_MS));
    assertEquals("ok", h.cmd("unwrite " + path, BOUND_MS));
  }
}
