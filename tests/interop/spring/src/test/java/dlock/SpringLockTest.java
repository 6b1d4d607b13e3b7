package dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.integration.redis.util.RedisLockRegistry;
import org.springframework.integration.redis.util.RedisLockRegistry.RedisLockType;

/**
 * A real RedisLockRegistry (spring-integration-redis, Lettuce) and the dlock
 * command with --layout spring on one private redis-server
 * (tests/interop/run.sh passes its URL and the command), in both of the
 * registry's modes: exclusion both ways, how soon a waiter of one side gets
 * the lock after the other side's release (leases of 30 s, so only a
 * wake-up explains a prompt grant; printed, and asserted loosely where a
 * wake-up exists: Spring's SPIN_LOCK release publishes nothing, so a dlock
 * waiter then sleeps to the lease's end, which is asserted instead), and a
 * mixed counter race. Bounded: every wait has a limit, the class a
 * timeout.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class SpringLockTest {
  static final String URL = prop("dlock.url", "DLOCK_URL");
  static final String DLOCK = prop("dlock.bin", "DLOCK_BIN");
  static final String REGISTRY = "interop";
  static final long LEASE_MS = 30_000;
  /** "promptly": a wake-up must come well within this. */
  static final long PROMPT_MS = 2000;

  private LettuceConnectionFactory cf;
  private RedisClient lettuce;
  private StatefulRedisConnection<String, String> conn;
  private final List<Process> procs = new ArrayList<>();
  private final List<RedisLockRegistry> registries = new ArrayList<>();
  private ExecutorService pool;

  static String prop(String p, String env) {
    String v = System.getProperty(p);
    if (v == null || v.isEmpty())
      v = System.getenv(env);
    if (v == null || v.isEmpty())
      throw new IllegalStateException(p +
                                      " is not set: run tests/interop/run.sh");
    return v;
  }

  @BeforeEach
  void setUp() {
    URI u = URI.create(URL);
    cf = new LettuceConnectionFactory(
        new RedisStandaloneConfiguration(u.getHost(), u.getPort()));
    cf.afterPropertiesSet();
    cf.start();
    lettuce = RedisClient.create(URL);
    conn = lettuce.connect();
    pool = Executors.newCachedThreadPool();
  }

  @AfterEach
  void tearDown() throws Exception {
    for (Process p : procs)
      p.destroyForcibly();
    pool.shutdownNow();
    for (RedisLockRegistry r : registries)
      r.destroy();
    conn.close();
    lettuce.shutdown();
    cf.destroy();
  }

  RedisLockRegistry registry(RedisLockType type) {
    RedisLockRegistry r = new RedisLockRegistry(cf, REGISTRY, LEASE_MS);
    r.setRedisLockType(type);
    registries.add(r);
    return r;
  }

  String springUrl() { return URL + "/?layout=spring&registry=" + REGISTRY; }

  /**
   * `dlock -u URL OPTS... NAME sh -c 'echo held; read x'`: holds until stdin
   * closes.
   */
  Process dlockHold(String name, String... opts) throws Exception {
    List<String> a = new ArrayList<>(List.of(DLOCK, "-u", springUrl()));
    a.addAll(List.of(opts));
    a.addAll(List.of(name, "sh", "-c",
                     "echo held $(date +%s%3N); read x; date +%s%3N"));
    ProcessBuilder pb = new ProcessBuilder(a);
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    Process p = pb.start();
    procs.add(p);
    return p;
  }

  /** The next stdout line of p, within boundMs (null at its end). */
  static String line(Process p, long boundMs) throws Exception {
    BufferedReader r = new BufferedReader(
        new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8), 1);
    Future<String> f = Executors.newSingleThreadExecutor().submit(r::readLine);
    return f.get(boundMs, TimeUnit.MILLISECONDS);
  }

  long numsub(String channel) {
    return conn.sync().pubsubNumsub(channel).getOrDefault(channel, 0L);
  }

  static String channel(String name) {
    return REGISTRY + "-channel:" + REGISTRY + ":" + name;
  }

  static String uniq(String what, RedisLockType t) {
    return what + "-" + t + "-" + System.nanoTime();
  }

  // --------------------------------------------------------- Spring -> dlock

  @ParameterizedTest
  @EnumSource(RedisLockType.class)
  void springHoldsDlockWaits(RedisLockType type) throws Exception {
    String name = uniq("s2d", type);
    Lock lock = registry(type).obtain(name);
    assertTrue(lock.tryLock(5, TimeUnit.SECONDS));
    RedisCommands<String, String> redis = conn.sync();
    assertEquals(1, redis.exists(REGISTRY + ":" + name));
    // dlock -n refuses while Spring holds
    Process n = new ProcessBuilder(DLOCK, "-n", "-u", springUrl(), name, "true")
                    .redirectErrorStream(true)
                    .start();
    procs.add(n);
    assertTrue(n.waitFor(15, TimeUnit.SECONDS));
    assertEquals(1, n.exitValue(), "dlock -n must see Spring's hold");
    // a dlock waiter: subscribed to the key's channel, then Spring unlocks
    Process w = dlockHold(name, "-w", "60");
    long deadline = System.currentTimeMillis() + 15_000;
    while (numsub(channel(name)) < 1 && System.currentTimeMillis() < deadline)
      Thread.sleep(20);
    assertTrue(numsub(channel(name)) >= 1, "the dlock waiter never subscribed");
    Thread.sleep(200); // its attempt after subscribing has been refused
    long released = System.currentTimeMillis();
    lock.unlock();
    String held = line(w, LEASE_MS + 15_000);
    assertTrue(held != null && held.startsWith("held "),
               "dlock never got the lock: " + held);
    long latency = Long.parseLong(held.substring(5).trim()) - released;
    System.out.printf(
        "spring %s -> dlock: waiter ran %d ms after Spring's unlock%n", type,
        latency);
    if (type == RedisLockType.PUB_SUB_LOCK)
      assertTrue(latency < PROMPT_MS,
                 "not woken by Spring's message: " + latency + " ms");
    // Spring's SPIN_LOCK unlock sends nothing: the waiter sleeps to the
    // holder's lease (never a poll), and is granted by then
    // now dlock holds: Spring is refused
    assertFalse(registry(type).obtain(name).tryLock());
    w.getOutputStream().close();
    assertTrue(w.waitFor(15, TimeUnit.SECONDS));
    assertEquals(0, w.exitValue());
  }

  // --------------------------------------------------------- dlock -> Spring

  @ParameterizedTest
  @EnumSource(RedisLockType.class)
  void dlockHoldsSpringWaits(RedisLockType type) throws Exception {
    String name = uniq("d2s", type);
    Process h = dlockHold(name);
    String held = line(h, 15_000);
    assertTrue(held != null && held.startsWith("held "),
               "dlock did not get the lock");
    RedisCommands<String, String> redis = conn.sync();
    String id = redis.get(REGISTRY + ":" + name);
    assertTrue(id != null && id.length() == 36, "not a client id: " + id);
    long pttl = redis.pttl(REGISTRY + ":" + name);
    assertTrue(pttl > 0 && pttl <= LEASE_MS, "lease " + pttl);
    Lock lock = registry(type).obtain(name);
    assertFalse(lock.tryLock(), "Spring must see dlock's hold");
    // a Spring waiter (another registry: the refused one above is idle)
    Lock waiter = registry(type).obtain(name);
    Future<Long> got = pool.submit(() -> {
      if (!waiter.tryLock(60, TimeUnit.SECONDS))
        return -1L;
      long at = System.currentTimeMillis();
      waiter.unlock();
      return at;
    });
    Thread.sleep(500); // it has tried and waits (PUB_SUB: subscribed)
    assertFalse(got.isDone());
    h.getOutputStream().close(); // the command ends; dlock releases
    String ended = line(h, 15_000);
    long endedAt = Long.parseLong(ended.trim());
    long at = got.get(LEASE_MS + 15_000, TimeUnit.MILLISECONDS);
    assertTrue(at > 0, "Spring never got the lock");
    long latency = at - endedAt;
    System.out.printf(
        "dlock -> spring %s: waiter got it %d ms after dlock's command ended%n",
        type, latency);
    assertTrue(latency < PROMPT_MS,
               "Spring's waiter was not prompt: " + latency + " ms");
    assertTrue(h.waitFor(15, TimeUnit.SECONDS));
    assertEquals(0, h.exitValue());
  }

  // --------------------------------------------------------- conformance

  /**
   * The server's state of one lock, as Spring reads it: type, value shape, TTL
   * in s.
   */
  String dump(String name) {
    RedisCommands<String, String> redis = conn.sync();
    String key = REGISTRY + ":" + name;
    String type = redis.type(key);
    String v = "string".equals(type) ? redis.get(key) : null;
    String shape =
        v == null ? "-"
        : v.matches(
              "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
            ? "<uuid>"
            : v;
    long pttl = redis.pttl(key);
    long ttl = pttl < 0 ? pttl : (pttl + 999) / 1000;
    List<String> keys = redis.keys("*" + name + "*");
    return type + " " + shape + " ttl=" + ttl + " keys=" + keys.size();
  }

  /**
   * One sequence driven twice on two names, once by the registry and once
   * by dlock (the command: hold, a refused try by the other side, release):
   * after each step the lock's state and the release's message on the
   * pattern Spring's PUB_SUB_LOCK waiters subscribe must be the same, the
   * name aside. (A SPIN_LOCK unlock publishes nothing: dlock's always does,
   * which SPIN_LOCK waiters ignore; so the comparison runs in PUB_SUB_LOCK
   * mode.)
   */
  @org.junit.jupiter.api.Test
  void conformance() throws Exception {
    String a = "conf-spring-" + System.nanoTime(),
           b = "conf-dlock-" + System.nanoTime();
    io.lettuce.core.pubsub.StatefulRedisPubSubConnection<String, String> sub =
        lettuce.connectPubSub();
    java.util.concurrent.BlockingQueue<String> msgs =
        new java.util.concurrent.LinkedBlockingQueue<>();
    sub.addListener(
        new io.lettuce.core.pubsub.RedisPubSubAdapter<String, String>() {
          @Override
          public void message(String pattern, String channel, String message) {
            msgs.add(channel + " " + message);
          }
        });
    sub.sync().psubscribe(REGISTRY + "-channel:*");
    try {
      List<String> spring = new ArrayList<>(), dlock = new ArrayList<>();
      // the registry's side
      Lock lock = registry(RedisLockType.PUB_SUB_LOCK).obtain(a);
      spring.add("free: " + dump(a));
      assertTrue(lock.tryLock(5, TimeUnit.SECONDS));
      spring.add("held: " + dump(a));
      Process n =
          new ProcessBuilder(DLOCK, "-n", "-u", springUrl(), a, "true").start();
      procs.add(n);
      assertTrue(n.waitFor(15, TimeUnit.SECONDS));
      spring.add("other's try: " + n.exitValue() + " " + dump(a));
      lock.unlock();
      spring.add("released: " + dump(a));
      spring.add("message: " + msgs.poll(10, TimeUnit.SECONDS));
      // dlock's side
      dlock.add("free: " + dump(b));
      Process h = new ProcessBuilder(DLOCK, "-u", springUrl(), "-l", "30", b,
                                     "sh", "-c", "echo held; read x")
                      .start();
      procs.add(h);
      assertEquals("held", line(h, 15_000));
      dlock.add("held: " + dump(b));
      boolean got = registry(RedisLockType.PUB_SUB_LOCK).obtain(b).tryLock();
      dlock.add("other's try: " + (got ? 0 : 1) + " " + dump(b));
      h.getOutputStream().close();
      assertTrue(h.waitFor(15, TimeUnit.SECONDS));
      dlock.add("released: " + dump(b));
      dlock.add("message: " + msgs.poll(10, TimeUnit.SECONDS));
      List<String> norm = new ArrayList<>();
      for (String l : dlock)
        norm.add(l.replace(b, a));
      System.out.println("conformance (registry's side): " + spring);
      assertEquals(spring, norm);
    } finally {
      sub.close();
    }
  }

  // --------------------------------------------------------------- race

  @ParameterizedTest
  @EnumSource(RedisLockType.class)
  void mixedCounterRace(RedisLockType type) throws Exception {
    String name = uniq("race", type);
    int iters = 25;
    Path file = Files.createTempFile("dlock-spring-race-", ".count");
    try {
      Files.writeString(file, "0\n");
      // 2 dlock processes, each taking the lock `iters` times in a loop
      String bump = "read v < \"$1\"; echo $((v + 1)) > \"$1\"";
      List<Process> dl = new ArrayList<>();
      for (int k = 0; k < 2; k++) {
        String loop = "i=0; while [ $i -lt " + iters +
                      " ]; do \"$0\" -w 60 -u \"$1\" \"$2\" sh -c '" + bump +
                      "' sh \"$3\" || exit 1; i=$((i + 1)); done";
        ProcessBuilder pb = new ProcessBuilder(
            "sh", "-c", loop, DLOCK, springUrl(), name, file.toString());
        pb.redirectErrorStream(true);
        Process p = pb.start();
        procs.add(p);
        dl.add(p);
      }
      // 2 Spring threads sharing one registry (the registry's local lock
      // keeps them apart, Redis keeps them from dlock)
      Lock lock = registry(type).obtain(name);
      List<Future<Void>> fs = new ArrayList<>();
      for (int k = 0; k < 2; k++)
        fs.add(pool.submit(() -> {
          for (int i = 0; i < iters; i++) {
            assertTrue(lock.tryLock(60, TimeUnit.SECONDS));
            try {
              long v = Long.parseLong(Files.readString(file).trim());
              Files.writeString(file, (v + 1) + "\n");
            } finally {
              lock.unlock();
            }
          }
          return null;
        }));
      for (Future<Void> f : fs)
        f.get(180, TimeUnit.SECONDS);
      for (Process p : dl) {
        assertTrue(p.waitFor(180, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(),
                     new String(p.getInputStream().readAllBytes()));
      }
      assertEquals(4 * iters, Long.parseLong(Files.readString(file).trim()));
    } finally {
      Files.deleteIfExists(file);
    }
  }
}
