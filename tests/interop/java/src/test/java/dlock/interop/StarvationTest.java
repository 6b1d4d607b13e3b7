package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RLock;

/**
 * Redisson waiters among dlock waiters that hand the lock to each other:
 * dlock's releases hand the lock straight to the oldest queued dlock waiter,
 * and Redisson's waiters are not in that queue. The library leaves one
 * release in every 50 ms open to a race instead of handing it over, so a
 * Redisson waiter is never starved. Here two dlock processes take and release
 * the lock back to back while two Redisson threads take it ROUNDS times each;
 * every Redisson acquisition must succeed, and the worst wait is bounded.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class StarvationTest extends Env {
  private static final int ROUNDS = 10;
  /* far above the 50 ms pass-on period, far below a starved waiter's wait */
  private static final long WORST_WAIT_MS = 5_000;
  private final ExecutorService pool = Executors.newCachedThreadPool();

  @AfterEach
  void stopPool() { pool.shutdownNow(); }

  @Test
  void redissonWaitersNotStarvedByDlockHandOffs() throws Exception {
    List<Proc> hammers = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      Proc p = helper();
      p.send("hammer " + name + " 8000");
      hammers.add(p);
    }
    List<Future<Long>> redissonThreads = new ArrayList<>();
    for (int t = 0; t < 2; t++) {
      redissonThreads.add(pool.submit(() -> {
        RLock l = redisson().getLock(name);
        long worst = 0;
        for (int i = 0; i < ROUNDS; i++) {
          long t0 = System.nanoTime();
          assertTrue(l.tryLock(20, TimeUnit.SECONDS), "Redisson's tryLock(20 s) among dlock hand-offs");
          worst = Math.max(worst, ms(t0));
          l.unlock();
        }
        return worst;
      }));
    }
    long worst = 0;
    for (Future<Long> f : redissonThreads)
      worst = Math.max(worst, f.get(50, TimeUnit.SECONDS));
    long dlockAcquisitions = 0;
    for (Proc p : hammers) {
      String a = p.line(20_000);
      assertTrue(a.startsWith("ok "), "dlock's contention loop: " + a);
      dlockAcquisitions += Long.parseLong(a.substring(3).trim());
    }
    System.out.println("Redisson worst wait " + worst + " ms over " + 2 * ROUNDS
        + " acquisitions, among " + dlockAcquisitions + " dlock acquisitions");
    assertTrue(dlockAcquisitions > 2 * ROUNDS, "the dlock processes contended (" + dlockAcquisitions + ")");
    assertTrue(worst < WORST_WAIT_MS, "Redisson's worst wait " + worst + " ms");
  }
}
