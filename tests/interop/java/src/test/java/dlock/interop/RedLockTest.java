package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.RedissonMultiLock;
import org.redisson.RedissonRedLock;
import org.redisson.api.RLock;
import org.redisson.config.Config;
import org.redisson.Redisson;
import org.redisson.api.RedissonClient;

/**
 * RedissonRedLock and RedissonMultiLock against dlock's Redlock (`dlock -u A
 * -u B -u C NAME`) and multilock (`--all`) over the same three independent
 * servers. Each node holds Redisson's RLock layout, so a majority (or all)
 * held by one side keeps the other out, both ways.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RedLockTest extends Env {
  private static final String[] URLS = prop("dlock.urls", "DLOCK_URLS").split(",");
  private final List<RedissonClient> nodes = new ArrayList<>();

  private RLock[] rlocks() {
    if (nodes.isEmpty()) {
      for (String u : URLS) {
        Config cfg = new Config();
        cfg.useSingleServer().setAddress(u).setConnectionMinimumIdleSize(1)
            .setConnectionPoolSize(2).setSubscriptionConnectionMinimumIdleSize(1)
            .setSubscriptionConnectionPoolSize(2);
        nodes.add(Redisson.create(cfg));
      }
    }
    RLock[] l = new RLock[nodes.size()];
    for (int i = 0; i < l.length; i++) l[i] = nodes.get(i).getLock(name);
    return l;
  }

  private String[] withUrls(String... rest) {
    List<String> a = new ArrayList<>();
    for (String u : URLS) {
      a.add("-u");
      a.add(u);
    }
    for (String r : rest) a.add(r);
    return a.toArray(new String[0]);
  }

  @org.junit.jupiter.api.AfterEach
  void closeNodes() {
    for (RedissonClient c : nodes) c.shutdown(0, 2, TimeUnit.SECONDS);
    nodes.clear();
  }

  @Test
  @SuppressWarnings("deprecation")
  void redissonRedLockExcludesDlockRedlock() throws Exception {
    assertEquals(3, URLS.length, "three servers");
    RedissonRedLock rl = new RedissonRedLock(rlocks());
    assertTrue(rl.tryLock(5, 30, TimeUnit.SECONDS), "Redisson's RedLock");
    assertEquals(1, dlockRun(15_000, withUrls("-n", name, "true")).status(),
        "dlock's Redlock -n while Redisson's RedLock holds every node");
    rl.unlock();
    assertEquals(0, dlockRun(15_000, withUrls("-n", name, "true")).status(),
        "dlock's Redlock once Redisson unlocked");
  }

  @Test
  @SuppressWarnings("deprecation")
  void dlockRedlockExcludesRedissonRedLock() throws Exception {
    Proc h = dlockHold(name, withUrls());
    h.awaitHeld(15_000);
    RLock[] l = rlocks();
    int held = 0;
    for (RLock x : l) held += x.isLocked() ? 1 : 0;
    assertTrue(held >= 2, "dlock holds a majority of the nodes (" + held + ")");
    RedissonRedLock rl = new RedissonRedLock(l);
    assertFalse(rl.tryLock(300, 30_000, TimeUnit.MILLISECONDS), "Redisson's RedLock while dlock's Redlock holds");
    h.closeStdin();
    assertEquals(0, h.waitExit(15_000));
    assertTrue(rl.tryLock(5, 30, TimeUnit.SECONDS), "Redisson's RedLock once dlock exits");
    rl.unlock();
  }

  @Test
  void dlockRedlockWaiterGetsItAfterRedissonUnlocks() throws Exception {
    RedissonRedLock rl = redLock();
    assertTrue(rl.tryLock(5, 30, TimeUnit.SECONDS));
    Proc w = start(dlockArgs(withUrls("-w", "20", name, "sh", "-c", "echo got")));
    // waiting, as the first node sees it: subscribed to the lock's channel
    String channel = "redisson_lock__channel:{" + name + "}";
    waitFor("dlock's Redlock waiter subscribed on the first node", 10_000,
        io(() -> redis().numsub(channel) > 0));
    assertTrue(w.alive(), "dlock's Redlock waits while Redisson holds");
    long t0 = System.nanoTime();
    rl.unlock();
    assertEquals("got", w.line(15_000), "dlock's Redlock waiter took the lock");
    assertEquals(0, w.waitExit(15_000));
    assertTrue(ms(t0) < 10_000, "got it " + ms(t0) + " ms after Redisson's unlock");
  }

  @Test
  void multiLockAgainstDlockAll() throws Exception {
    RLock[] l = rlocks();
    RedissonMultiLock ml = new RedissonMultiLock(l);
    assertTrue(ml.tryLock(5, 30, TimeUnit.SECONDS), "Redisson's MultiLock");
    assertEquals(1, dlockRun(15_000, withUrls("--all", "-n", name, "true")).status(),
        "dlock --all -n while Redisson's MultiLock holds every node");
    ml.unlock();
    Proc h = dlockHold(name, withUrls("--all"));
    h.awaitHeld(15_000);
    for (RLock x : l) assertTrue(x.isLocked(), "dlock --all holds every node");
    assertFalse(ml.tryLock(300, 30_000, TimeUnit.MILLISECONDS), "Redisson's MultiLock while dlock --all holds");
    h.closeStdin();
    assertEquals(0, h.waitExit(15_000));
    assertTrue(ml.tryLock(5, 30, TimeUnit.SECONDS), "Redisson's MultiLock once dlock exits");
    ml.unlock();
  }

  @SuppressWarnings("deprecation")
  private RedissonRedLock redLock() { return new RedissonRedLock(rlocks()); }

  private String[] dlockArgs(String... args) {
    String[] a = new String[args.length + 1];
    a[0] = DLOCK;
    System.arraycopy(args, 0, a, 1, args.length);
    return a;
  }
}
