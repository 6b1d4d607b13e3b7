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
import org.redisson.api.RReadWriteLock;

/**
 * RReadWriteLock against the library's DLOCK_READ / DLOCK_WRITE (through the
 * C helper, on NAME itself) and against the command's `dlock -s NAME`, which
 * is the read side of NAME:dlock-rw (docs/LAYOUT.md: Redisson's lock and
 * read-write layouts cannot share a key).
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class ReadWriteLockTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  @Test
  void readersShareWritersExclude() throws Exception {
    RReadWriteLock rw = redisson().getReadWriteLock(name);
    Proc c = helper();
    assertEquals("ok", c.cmd("read " + name + " 0", 10_000), "dlock reader");
    assertTrue(rw.readLock().tryLock(), "Redisson reader joins dlock's reader");
    assertFalse(rw.writeLock().tryLock(), "Redisson writer refused while readers hold");
    rw.readLock().unlock();
    assertFalse(rw.writeLock().tryLock(), "Redisson writer refused while dlock's reader holds");
    assertEquals("ok", c.cmd("unread " + name, 10_000));
    assertTrue(rw.writeLock().tryLock(), "Redisson writer once the readers left");
    assertTrue(c.cmd("read " + name + " 0", 10_000).startsWith("err DLOCK_EBUSY"), "dlock reader while Redisson writes");
    assertTrue(c.cmd("write " + name + " 0", 10_000).startsWith("err DLOCK_EBUSY"), "dlock writer while Redisson writes");
    rw.writeLock().unlock();
    assertEquals("ok", c.cmd("write " + name + " 0", 10_000), "dlock writer");
    assertFalse(rw.readLock().tryLock(), "Redisson reader refused while dlock writes");
    assertFalse(rw.writeLock().tryLock(), "Redisson writer refused while dlock writes");
    assertEquals("ok", c.cmd("unwrite " + name, 10_000));
    assertTrue(rw.readLock().tryLock());
    rw.readLock().unlock();
  }

  /** A dlock waiter (writer or reader) wakes when Redisson's writer unlocks. */
  private void dlockWaiterWakes(String verb, String waitKey) throws Exception {
    RReadWriteLock rw = redisson().getReadWriteLock(name);
    rw.writeLock().lock();
    Proc c = helper();
    c.send(verb + " " + name + " 10000");
    waitFor("dlock's " + verb + " waiter registered", 10_000,
        io(() -> redis().num("ZCARD", waitKey + ":{" + name + "}") == 1));
    long t0 = System.nanoTime();
    rw.writeLock().unlock();
    assertEquals("ok", c.line(PROMPT_MS + 3000));
    assertTrue(ms(t0) < PROMPT_MS, "dlock's " + verb + " waiter got it " + ms(t0) + " ms after Redisson's unlock");
    assertFalse(rw.writeLock().tryLock(), "Redisson writer refused while dlock holds");
    assertEquals("ok", c.cmd("un" + verb + " " + name, 10_000));
  }

  @Test
  void dlockWriterWokenByRedissonWriteUnlock() throws Exception {
    dlockWaiterWakes("write", "dlock_lock_rw_queue");
  }

  @Test
  void dlockReaderWokenByRedissonWriteUnlock() throws Exception {
    dlockWaiterWakes("read", "dlock_lock_rw_readers");
  }

  /** A Redisson waiter (reader or writer) wakes when dlock's writer releases. */
  private void redissonWaiterWakes(boolean reader) throws Exception {
    RReadWriteLock rw = redisson().getReadWriteLock(name);
    Proc c = helper();
    assertEquals("ok", c.cmd("write " + name + " 0", 10_000));
    String channel = "redisson_rwlock:{" + name + "}";
    long before = redis().numsub(channel);
    long[] gotAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      var l = reader ? rw.readLock() : rw.writeLock();
      boolean ok = l.tryLock(20, TimeUnit.SECONDS);
      gotAt[0] = System.nanoTime();
      if (ok) l.unlock();
      return ok;
    });
    waitFor("Redisson's waiter subscribed", 10_000, io(() -> redis().numsub(channel) > before));
    long t0 = System.nanoTime();
    assertEquals("ok", c.cmd("unwrite " + name, 10_000));
    assertTrue(f.get(PROMPT_MS + 3000, TimeUnit.MILLISECONDS));
    long waited = (gotAt[0] - t0) / 1_000_000L;
    assertTrue(waited < PROMPT_MS, "Redisson's waiter got it " + waited + " ms after dlock's release");
  }

  @Test
  void redissonReaderWokenByDlockWriteRelease() throws Exception { redissonWaiterWakes(true); }

  @Test
  void redissonWriterWokenByDlockWriteRelease() throws Exception { redissonWaiterWakes(false); }

  @Test
  void commandSharedIsReadSideOfDlockRw() throws Exception {
    RReadWriteLock rw = redisson().getReadWriteLock(name + ":dlock-rw");
    Proc s = dlockHold(name, "-s");
    s.awaitHeld(10_000);
    assertFalse(rw.writeLock().tryLock(), "Redisson writer of NAME:dlock-rw while `dlock -s NAME` holds");
    assertTrue(rw.readLock().tryLock(), "Redisson reader of NAME:dlock-rw shares with `dlock -s NAME`");
    rw.readLock().unlock();
    s.closeStdin();
    assertEquals(0, s.waitExit(10_000));

    Proc x = dlockHold(name);
    x.awaitHeld(10_000);
    assertFalse(rw.readLock().tryLock(), "Redisson reader of NAME:dlock-rw while an exclusive dlock holds NAME");
    x.closeStdin();
    assertEquals(0, x.waitExit(10_000));

    rw.writeLock().lock();
    assertEquals(1, dlockRun(10_000, "-n", "-s", name, "true").status(), "dlock -n -s while Redisson writes NAME:dlock-rw");
    rw.writeLock().unlock();
    assertEquals(0, dlockRun(10_000, "-n", "-s", name, "true").status());
  }

  /** `dlock -s NAME --watchdog 1` renews its read hold: a Redisson writer waits 3.5 leases in vain. */
  @Test
  void dlockReadWatchdogKeepsRedissonWriterOut() throws Exception {
    RReadWriteLock rw = redisson().getReadWriteLock(name + ":dlock-rw");
    Proc s = dlockHold(name, "-s", "--watchdog", "1");
    s.awaitHeld(10_000);
    long t0 = System.nanoTime();
    assertFalse(rw.writeLock().tryLock(3500, TimeUnit.MILLISECONDS), "Redisson's writer waited 3.5 leases in vain");
    assertTrue(ms(t0) >= 3400);
    s.closeStdin();
    assertEquals(0, s.waitExit(10_000));
    assertTrue(rw.writeLock().tryLock(0, TimeUnit.SECONDS), "Redisson's writer once dlock's reader exits");
    rw.writeLock().unlock();
  }

  /** Redisson's 1 s watchdog renews its write and read holds: dlock waits 3.5 leases in vain. */
  @Test
  void redissonWatchdogKeepsDlockOutOfRw() throws Exception {
    RReadWriteLock rw = redisson(1000).getReadWriteLock(name + ":dlock-rw");
    rw.writeLock().lock();
    long t0 = System.nanoTime();
    assertEquals(1, dlockRun(15_000, "-w", "3.5", "-s", name, "true").status(), "dlock -s -w 3.5 ran out");
    assertTrue(ms(t0) >= 3400);
    rw.writeLock().unlock();
    rw.readLock().lock();
    t0 = System.nanoTime();
    assertEquals(1, dlockRun(15_000, "-w", "3.5", name, "true").status(), "exclusive dlock -w 3.5 ran out");
    assertTrue(ms(t0) >= 3400);
    rw.readLock().unlock();
    assertEquals(0, dlockRun(10_000, "-n", name, "true").status());
  }
}
