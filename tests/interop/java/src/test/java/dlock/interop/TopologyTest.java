package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.redisson.config.ReadMode;
import org.redisson.config.SubscriptionMode;

/**
 * RLock against the dlock command on the topologies beyond one server: a
 * master behind Redis Sentinel (redis-sentinel://) and a Redis Cluster
 * (redis-cluster://), with Redisson configured for each as its users would
 * (useSentinelServers, useClusterServers; reads and subscriptions on
 * masters). Both directions of exclusion, and the wake-ups both ways: a
 * Redisson waiter woken by dlock's release, a dlock waiter by Redisson's
 * unlock, each well before the holder's lease could have run out. On a
 * cluster the names fall on different masters, and wake-ups go through
 * sharded pub/sub on both sides.
 *
 * The servers come from tests/harness/with_topologies.c (environment
 * DLOCK_SENTINEL_* and DLOCK_CLUSTER_*), which tests/interop/run.sh wraps
 * around Maven; without them these tests are skipped.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class TopologyTest extends Env {
  private final ExecutorService pool = Executors.newCachedThreadPool();
  private final List<RedissonClient> mine = new ArrayList<>();

  @AfterEach
  void stop() {
    pool.shutdownNow();
    for (RedissonClient c : mine) c.shutdown(0, 2, TimeUnit.SECONDS);
  }

  private static String env(String k) {
    String v = System.getenv(k);
    return v == null || v.isEmpty() ? null : v;
  }

  /** The topology: its dlock URL and a Redisson client on it. */
  private record Topo(String url, RedissonClient redisson) {}

  private Topo sentinel() {
    String url = env("DLOCK_SENTINEL_URL"), addrs = env("DLOCK_SENTINEL_ADDRS");
    assumeTrue(url != null && addrs != null, "no Sentinel: run tests/interop/run.sh");
    Config cfg = new Config();
    cfg.useSentinelServers().setMasterName(env("DLOCK_SENTINEL_MASTER"))
        .addSentinelAddress(addrs.split(",")).setReadMode(ReadMode.MASTER)
        .setSubscriptionMode(SubscriptionMode.MASTER).setCheckSentinelsList(false);
    return new Topo(url, create(cfg));
  }

  private Topo cluster() {
    String url = env("DLOCK_CLUSTER_URL"), addrs = env("DLOCK_CLUSTER_ADDRS");
    assumeTrue(url != null && addrs != null, "no Cluster: run tests/interop/run.sh");
    Config cfg = new Config();
    cfg.useClusterServers().addNodeAddress(addrs.split(","))
        .setReadMode(ReadMode.MASTER).setSubscriptionMode(SubscriptionMode.MASTER);
    return new Topo(url, create(cfg));
  }

  private RedissonClient create(Config cfg) {
    RedissonClient c = Redisson.create(cfg);
    mine.add(c);
    return c;
  }

  /** Names whose slots differ (on a cluster: several masters). */
  private List<String> names(int n) {
    List<String> out = new ArrayList<>();
    for (int i = 0; i < n; i++) out.add(name + "-" + i);
    return out;
  }

  private void exclusion(Topo t) throws Exception {
    for (String n : names(4)) {
      RLock l = t.redisson().getLock(n);
      l.lock();
      assertEquals(1, dlockRun(10_000, "-u", t.url(), "-n", n, "true").status(),
          n + ": dlock -n while Redisson holds");
      l.unlock();
      assertEquals(0, dlockRun(10_000, "-u", t.url(), "-n", n, "true").status(),
          n + ": dlock -n once Redisson unlocked");
      Proc h = dlockHold(n, "-u", t.url());
      h.awaitHeld(10_000);
      assertTrue(l.isLocked(), n + ": Redisson sees dlock's hold");
      assertFalse(l.tryLock(0, TimeUnit.SECONDS), n + ": Redisson's tryLock(0) while dlock holds");
      h.closeStdin();
      assertEquals(0, h.waitExit(10_000));
      assertTrue(l.tryLock(0, TimeUnit.SECONDS), n + ": Redisson gets it once dlock exits");
      l.unlock();
    }
  }

  private void redissonWokenByDlock(Topo t) throws Exception {
    String n = name + "-rw";
    RLock l = t.redisson().getLock(n);
    Proc h = dlockHold(n, "-u", t.url());
    h.awaitHeld(10_000);
    long[] gotAt = new long[1];
    Future<Boolean> f = pool.submit(() -> {
      boolean ok = l.tryLock(30, TimeUnit.SECONDS);
      gotAt[0] = System.nanoTime();
      if (ok) l.unlock();
      return ok;
    });
    Thread.sleep(1000); // scenario pace: Redisson is waiting (subscribed)
    assertFalse(f.isDone(), "Redisson's tryLock returned while dlock held");
    long t0 = System.nanoTime();
    h.closeStdin();
    assertTrue(f.get(PROMPT_MS + 5000, TimeUnit.MILLISECONDS), "Redisson's waiter got the lock");
    long waited = (gotAt[0] - t0) / 1_000_000L;
    // dlock's lease is its 30 s watchdog: only a wake-up explains this
    assertTrue(waited < PROMPT_MS, "Redisson's waiter got it " + waited + " ms after dlock's release");
    assertEquals(0, h.waitExit(10_000));
  }

  private void dlockWokenByRedisson(Topo t) throws Exception {
    String n = name + "-dw";
    RLock l = t.redisson().getLock(n);
    l.lock();
    Proc w = start(DLOCK, "-u", t.url(), "-w", "30", n, "sh", "-c", "echo got");
    Thread.sleep(1000); // scenario pace: dlock is waiting
    assertTrue(w.alive(), "dlock -w returned while Redisson held");
    long t0 = System.nanoTime();
    l.unlock();
    assertEquals("got", w.line(PROMPT_MS + 5000));
    long waited = ms(t0);
    assertTrue(waited < PROMPT_MS, "dlock's waiter got it " + waited + " ms after Redisson's unlock");
    assertEquals(0, w.waitExit(10_000));
  }

  @Test
  void sentinelExclusion() throws Exception { exclusion(sentinel()); }

  @Test
  void sentinelRedissonWokenByDlock() throws Exception { redissonWokenByDlock(sentinel()); }

  @Test
  void sentinelDlockWokenByRedisson() throws Exception { dlockWokenByRedisson(sentinel()); }

  @Test
  void clusterExclusion() throws Exception { exclusion(cluster()); }

  @Test
  void clusterRedissonWokenByDlock() throws Exception { redissonWokenByDlock(cluster()); }

  @Test
  void clusterDlockWokenByRedisson() throws Exception { dlockWokenByRedisson(cluster()); }
}
