package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Layout conformance, byte for byte: one scripted sequence per kind runs
 * twice, on twin fresh redis-servers (dlock.twins, private to this class):
 * once driven by Redisson, once by dlock (the C helper dlock_interop).
 * After every step the whole server state is dumped (every key with its
 * type, value, fields, members and scores, TTL in whole seconds) with the
 * pub/sub messages the step caused (a PSUBSCRIBE * connection, read up to
 * a marker published after the step, so nothing is timed). Each twin is
 * dumped right after its own side of the step. What is random is
 * normalised: permit ids and lock owners become labels (a permit id stored
 * as hex text gets another label than one stored as its bytes), timestamps
 * (scores past 10^12) become "set+Ns" from the server's TIME when the step
 * that set them began, Redisson's no-lease score "no-lease", a release
 * latch's request id and TTL are dropped. The two dumps must
 * be identical, except for keys and channels docs/LAYOUT.md lists as
 * deliberate extensions (its "Deliberate extensions" table, read here).
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ConformanceTest extends Env {
  static final String[] TWINS = prop("dlock.twins", "DLOCK_TWINS").split(",");
  static final long NO_LEASE = 922337203685477L;

  private final List<RedissonClient> mine = new ArrayList<>();
  private Twin rs, dl;

  @BeforeEach
  void twins() throws Exception {
    rs = new Twin(TWINS[0]);
    dl = new Twin(TWINS[1]);
  }

  @AfterEach
  void closeTwins() throws Exception {
    for (RedissonClient c : mine) c.shutdown(0, 2, TimeUnit.SECONDS);
    if (rs != null) rs.close();
    if (dl != null) dl.close();
  }

  private RedissonClient redissonAt(String url) {
    Config cfg = new Config();
    cfg.useSingleServer().setAddress(url).setConnectionMinimumIdleSize(1)
        .setConnectionPoolSize(2).setSubscriptionConnectionMinimumIdleSize(1)
        .setSubscriptionConnectionPoolSize(2);
    RedissonClient c = Redisson.create(cfg);
    mine.add(c);
    return c;
  }

  private String ok(Proc helper, String line) throws Exception {
    String a = helper.cmd(line, 15_000);
    assertTrue(a.startsWith("ok"), "dlock_interop `" + line + "`: " + a);
    return a.length() > 3 ? a.substring(3) : "";
  }

  // ---------------------------------------------------------------- kinds

  @Test
  void permitExpirableSemaphore() throws Exception {
    String n = "conf-psem";
    RPermitExpirableSemaphore s = redissonAt(TWINS[0]).getPermitExpirableSemaphore(n);
    Proc d = start(HELPER, TWINS[1]);
    Script k = new Script("RPermitExpirableSemaphore", n);
    k.step("trySetPermits(2)", () -> assertTrue(s.trySetPermits(2)),
        () -> assertEquals("set", ok(d, "psem-set " + n + " 2")));
    k.step("acquire, lease 60 s (P1)", () -> rs.label(s.tryAcquire(0, 60, TimeUnit.SECONDS), "P1"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 60000"), "P1"));
    k.step("acquire, lease 60 s (P2)", () -> rs.label(s.tryAcquire(0, 60, TimeUnit.SECONDS), "P2"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 60000"), "P2"));
    k.step("try acquire, none free", () -> assertNull(s.tryAcquire(0, 60, TimeUnit.SECONDS)),
        () -> assertTrue(d.cmd("psem-acquire " + n + " 60000", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("release P1", () -> s.release(rs.id("P1")),
        () -> ok(d, "psem-release " + n + " " + dl.id("P1")));
    k.step("acquire, lease 1 s (P3)", () -> rs.label(s.tryAcquire(0, 1, TimeUnit.SECONDS), "P3"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 1000"), "P3"));
    k.step("P3's lease runs out (nobody acts)", () -> rs.awaitExpired(n, "P3"),
        () -> dl.awaitExpired(n, "P3"));
    k.step("acquire, lease 60 s, reclaims P3 (P4)",
        () -> rs.label(s.tryAcquire(0, 60, TimeUnit.SECONDS), "P4"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 60000"), "P4"));
    k.step("release P2", () -> s.release(rs.id("P2")),
        () -> ok(d, "psem-release " + n + " " + dl.id("P2")));
    k.step("release P4", () -> s.release(rs.id("P4")),
        () -> ok(d, "psem-release " + n + " " + dl.id("P4")));
    k.step("acquire, lease 1 s (P5)", () -> rs.label(s.tryAcquire(0, 1, TimeUnit.SECONDS), "P5"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 1000"), "P5"));
    k.step("acquire, lease 2 s (P6)", () -> rs.label(s.tryAcquire(0, 2, TimeUnit.SECONDS), "P6"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 2000"), "P6"));
    k.step("P5's and P6's leases run out (nobody acts)",
        () -> { rs.awaitExpired(n, "P5"); rs.awaitExpired(n, "P6"); },
        () -> { dl.awaitExpired(n, "P5"); dl.awaitExpired(n, "P6"); });
    k.step("acquire, lease 60 s, reclaims the earliest expired only (P7)",
        () -> rs.label(s.tryAcquire(0, 60, TimeUnit.SECONDS), "P7"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 60000"), "P7"));
    k.step("release P7 (reclaims nothing else)", () -> s.release(rs.id("P7")),
        () -> ok(d, "psem-release " + n + " " + dl.id("P7")));
    k.step("a TTL of 100 s on the count (PEXPIRE by hand)",
        () -> rs.cmd.call("PEXPIRE", n, "100000"), () -> dl.cmd.call("PEXPIRE", n, "100000"));
    k.step("acquire, lease 60 s (P8): the ZSET gets the count's TTL",
        () -> rs.label(s.tryAcquire(0, 60, TimeUnit.SECONDS), "P8"),
        () -> dl.label(ok(d, "psem-acquire " + n + " 60000"), "P8"));
    k.step("release P8", () -> s.release(rs.id("P8")),
        () -> ok(d, "psem-release " + n + " " + dl.id("P8")));
    k.step("delete", () -> assertTrue(s.delete()),
        () -> assertEquals("deleted", ok(d, "psem-delete " + n)));
    k.check();
  }

  @Test
  void reentrantLock() throws Exception {
    String n = "conf-lock";
    RLock l = redissonAt(TWINS[0]).getLock(n);
    RLock other = redissonAt(TWINS[0]).getLock(n);
    Proc d = start(HELPER, TWINS[1]);
    Proc d2 = start(HELPER, TWINS[1]);
    Script k = new Script("RLock", n);
    k.step("lock (watchdog lease)", () -> l.lock(), () -> ok(d, "lock " + n + " 0"));
    k.step("lock again (re-enter)", () -> l.lock(), () -> ok(d, "lock " + n + " 0"));
    k.step("another client's tryLock(0) fails", () -> assertFalse(other.tryLock()),
        () -> assertTrue(d2.cmd("lock " + n + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("unlock (count 1 left)", () -> l.unlock(), () -> ok(d, "unlock " + n));
    k.step("unlock (free)", () -> l.unlock(), () -> ok(d, "unlock " + n));
    k.check();
  }

  @Test
  void reentrantLockHandOff() throws Exception {
    // a waiter each: Redisson's subscribes to the lock's channel and writes
    // nothing; dlock's queues in its own keys (docs/LAYOUT.md, "Keys and
    // channels") and is handed the lock on its grant channel
    String n = "conf-handoff";
    RLock l = redissonAt(TWINS[0]).getLock(n);
    RLock other = redissonAt(TWINS[0]).getLock(n);
    Proc d = start(HELPER, TWINS[1]);
    Proc d2 = start(HELPER, TWINS[1]);
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newSingleThreadExecutor();
    try {
      Script k = new Script("RLock hand-off", n);
      java.util.concurrent.Future<?>[] w = new java.util.concurrent.Future<?>[1];
      k.step("lock (watchdog lease)", () -> l.lock(), () -> ok(d, "lock " + n + " 0"));
      k.step("another client waits", () -> {
        w[0] = pool.submit(() -> other.lock());
        awaitTrue("Redisson's waiter subscribed", () -> numsub(rs, "redisson_lock__channel:{" + n + "}") >= 1);
      }, () -> {
        d2.send("lock " + n + " 30000");
        awaitTrue("dlock's waiter queued", () -> (Long) dl.cmd.call("EXISTS", "dlock_lock_queue:{" + n + "}") == 1);
      });
      k.step("unlock: the waiter gets it", () -> {
        l.unlock();
        w[0].get(15, TimeUnit.SECONDS);
      }, () -> {
        ok(d, "unlock " + n);
        String a = d2.line(15_000);
        assertTrue(a.startsWith("ok"), "dlock's waiter: " + a);
      });
      // Redisson's lock is per thread: the pool's thread unlocks
      k.step("the new holder unlocks (free)",
          () -> pool.submit(() -> other.unlock()).get(15, TimeUnit.SECONDS), () -> ok(d2, "unlock " + n));
      k.check();
    } finally {
      pool.shutdownNow();
    }
  }

  private static long numsub(Twin t, String channel) throws Exception {
    @SuppressWarnings("unchecked")
    List<Object> r = (List<Object>) t.cmd.call("PUBSUB", "NUMSUB", channel);
    return (Long) r.get(1);
  }

  interface Cond { boolean ok() throws Exception; }

  /** Waits (bounded: 10 s) for a condition. */
  private static void awaitTrue(String what, Cond c) throws Exception {
    long end = System.nanoTime() + 10_000_000_000L;
    while (!c.ok()) {
      if (System.nanoTime() > end) fail(what + ": not within 10 s");
      Thread.sleep(10);
    }
  }

  @Test
  void readWriteLock() throws Exception {
    String n = "conf-rw";
    org.redisson.api.RReadWriteLock rw = redissonAt(TWINS[0]).getReadWriteLock(n);
    org.redisson.api.RReadWriteLock rw2 = redissonAt(TWINS[0]).getReadWriteLock(n);
    Proc d = start(HELPER, TWINS[1]);
    Proc d2 = start(HELPER, TWINS[1]);
    Script k = new Script("RReadWriteLock", n);
    k.step("read lock", () -> rw.readLock().lock(), () -> ok(d, "read " + n + " 0"));
    k.step("read lock again (re-enter)", () -> rw.readLock().lock(), () -> ok(d, "read " + n + " 0"));
    k.step("another client's read lock", () -> assertTrue(rw2.readLock().tryLock()),
        () -> ok(d2, "read " + n + " 0"));
    org.redisson.api.RReadWriteLock rw3 = redissonAt(TWINS[0]).getReadWriteLock(n);
    Proc d3 = start(HELPER, TWINS[1]);
    k.step("a third client's write tryLock(0) fails", () -> assertFalse(rw3.writeLock().tryLock()),
        () -> assertTrue(d3.cmd("write " + n + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("the other client's read unlock", () -> rw2.readLock().unlock(), () -> ok(d2, "unread " + n));
    k.step("read unlock (1 left)", () -> rw.readLock().unlock(), () -> ok(d, "unread " + n));
    k.step("read unlock (free)", () -> rw.readLock().unlock(), () -> ok(d, "unread " + n));
    k.step("write lock", () -> rw.writeLock().lock(), () -> ok(d, "write " + n + " 0"));
    k.step("write unlock (free)", () -> rw.writeLock().unlock(), () -> ok(d, "unwrite " + n));
    k.check();
  }

  @Test
  void fairLock() throws Exception {
    String n = "conf-fair";
    RLock l = redissonAt(TWINS[0]).getFairLock(n);
    RLock other = redissonAt(TWINS[0]).getFairLock(n);
    Proc d = start(HELPER, TWINS[1]);
    Proc d2 = start(HELPER, TWINS[1]);
    Script k = new Script("RFairLock", n);
    k.step("lock (watchdog lease)", () -> l.lock(), () -> ok(d, "fair " + n + " 0"));
    k.step("lock again (re-enter)", () -> l.lock(), () -> ok(d, "fair " + n + " 0"));
    k.step("another client's tryLock(0) fails", () -> assertFalse(other.tryLock()),
        () -> assertTrue(d2.cmd("fair " + n + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("unlock (count 1 left)", () -> l.unlock(), () -> ok(d, "unfair " + n));
    k.step("unlock (free)", () -> l.unlock(), () -> ok(d, "unfair " + n));
    k.check();
  }

  @Test
  void semaphore() throws Exception {
    String n = "conf-sem";
    org.redisson.api.RSemaphore s = redissonAt(TWINS[0]).getSemaphore(n);
    Proc d = start(HELPER, TWINS[1]);
    Script k = new Script("RSemaphore", n);
    k.step("trySetPermits(2)", () -> assertTrue(s.trySetPermits(2)),
        () -> assertEquals("set", ok(d, "sem-set " + n + " 2")));
    k.step("acquire", () -> assertTrue(s.tryAcquire()), () -> ok(d, "sem-acquire " + n + " 0"));
    k.step("acquire", () -> assertTrue(s.tryAcquire()), () -> ok(d, "sem-acquire " + n + " 0"));
    k.step("try acquire, none free", () -> assertFalse(s.tryAcquire()),
        () -> assertTrue(d.cmd("sem-acquire " + n + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("release", () -> s.release(), () -> ok(d, "sem-release " + n));
    k.step("release", () -> s.release(), () -> ok(d, "sem-release " + n));
    k.check();
  }

  @Test
  void countDownLatch() throws Exception {
    String n = "conf-latch";
    org.redisson.api.RCountDownLatch l = redissonAt(TWINS[0]).getCountDownLatch(n);
    Proc d = start(HELPER, TWINS[1]);
    Script k = new Script("RCountDownLatch", n);
    k.step("trySetCount(2)", () -> assertTrue(l.trySetCount(2)),
        () -> assertEquals("set", ok(d, "latch-set " + n + " 2")));
    k.step("trySetCount(5) on a live latch", () -> assertFalse(l.trySetCount(5)),
        () -> assertEquals("unchanged", ok(d, "latch-set " + n + " 5")));
    k.step("countDown (1 left)", () -> l.countDown(), () -> ok(d, "latch-down " + n));
    k.step("countDown (0: released)", () -> l.countDown(), () -> ok(d, "latch-down " + n));
    k.step("countDown at 0", () -> l.countDown(), () -> ok(d, "latch-down " + n));
    k.check();
  }

  @Test
  void fencedLock() throws Exception {
    String n = "conf-fenced";
    org.redisson.api.RFencedLock l = redissonAt(TWINS[0]).getFencedLock(n);
    org.redisson.api.RFencedLock other = redissonAt(TWINS[0]).getFencedLock(n);
    Proc d = start(HELPER, TWINS[1]);
    Proc d2 = start(HELPER, TWINS[1]);
    Script k = new Script("RFencedLock", n);
    long[] tok = new long[2];
    k.step("lock (token 1)", () -> tok[0] = l.lockAndGetToken(),
        () -> tok[1] = Long.parseLong(ok(d, "fenced " + n + " 0")));
    assertEquals(tok[0], tok[1], "the first token");
    k.step("lock again (re-enter: token 2)", () -> tok[0] = l.lockAndGetToken(),
        () -> tok[1] = Long.parseLong(ok(d, "fenced " + n + " 0")));
    assertEquals(tok[0], tok[1], "the re-entry's token");
    // tryLock(), not tryLockAndGetToken(): in Redisson 3.52.0 the latter
    // never returns while the lock is held (FencedLockTest)
    k.step("another client's try fails", () -> assertFalse(other.tryLock()),
        () -> assertTrue(d2.cmd("fenced " + n + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("unlock (count 1 left)", () -> l.unlock(), () -> ok(d, "unfenced " + n));
    k.step("unlock (free)", () -> l.unlock(), () -> ok(d, "unfenced " + n));
    k.step("the other client locks (token 3)", () -> tok[0] = other.lockAndGetToken(),
        () -> tok[1] = Long.parseLong(ok(d2, "fenced " + n + " 0")));
    assertEquals(tok[0], tok[1], "the other client's token");
    k.step("it unlocks (free; the token stays)", () -> other.unlock(), () -> ok(d2, "unfenced " + n));
    k.check();
  }

  @Test
  void multiLock() throws Exception {
    // RedissonMultiLock over RLocks on one server; dlock's multilock over
    // reentrant locks (dlock_multilock_*)
    String a = "conf-multi-a", b = "conf-multi-b";
    RedissonClient r = redissonAt(TWINS[0]), r2 = redissonAt(TWINS[0]);
    RLock m = r.getMultiLock(r.getLock(a), r.getLock(b));
    RLock other = r2.getMultiLock(r2.getLock(a), r2.getLock(b));
    RLock otherB = r2.getLock(b);
    Proc d = start(HELPER, TWINS[1]);
    Proc d2 = start(HELPER, TWINS[1]);
    String dm = a + "," + b;
    Script k = new Script("RedissonMultiLock", a + "," + b);
    k.step("lock a and b (watchdog lease)", () -> m.lock(), () -> ok(d, "multi " + dm + " 0"));
    k.step("another client's try fails", () -> assertFalse(other.tryLock()),
        () -> assertTrue(d2.cmd("multi " + dm + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("unlock both", () -> m.unlock(), () -> ok(d, "unmulti " + dm));
    k.step("the other client locks b alone", () -> otherB.lock(), () -> ok(d2, "lock " + b + " 0"));
    k.step("the try fails at b and gives a back", () -> assertFalse(m.tryLock()),
        () -> assertTrue(d.cmd("multi " + dm + " 0", 15_000).startsWith("err DLOCK_EBUSY")));
    k.step("the other client unlocks b", () -> otherB.unlock(), () -> ok(d2, "unlock " + b));
    k.check();
  }

  // ---------------------------------------------------------------- script

  interface Action { void run() throws Exception; }

  /** The steps of one kind: each run on both twins, dumped and compared. */
  final class Script {
    final String kind, key;
    final List<String> diffs = new ArrayList<>();
    final List<String> log = new ArrayList<>();

    Script(String kind, String key) throws Exception {
      this.kind = kind;
      this.key = key;
      rs.flush();
      dl.flush();
    }

    void step(String what, Action redisson, Action dlock) throws Exception {
      rs.begin();
      redisson.run();
      List<String> a = rs.dump();
      dl.begin();
      dlock.run();
      List<String> b = dl.dump();
      log.add("== " + what);
      List<String> onlyR = new ArrayList<>(a), onlyD = new ArrayList<>(b);
      onlyR.removeAll(b);
      onlyD.removeAll(a);
      List<Pattern> ext = extensions(kind, key);
      for (String x : onlyR)
        if (!extension(ext, x)) diffs.add(what + ": Redisson only: " + x);
      for (String x : onlyD)
        if (!extension(ext, x)) diffs.add(what + ": dlock only:    " + x);
      for (String x : a) log.add("  " + (onlyR.contains(x) ? "R " : "  ") + x);
      for (String x : onlyD) log.add("  D " + x);
    }

    void check() {
      String out = String.join("\n", log);
      System.out.println("conformance " + kind + " (R: Redisson only, D: dlock only)\n" + out);
      if (!diffs.isEmpty())
        fail(kind + ": the states differ where docs/LAYOUT.md lists no extension:\n  "
            + String.join("\n  ", diffs));
    }
  }

  private static boolean extension(List<Pattern> ext, String line) {
    for (Pattern p : ext)
      if (p.matcher(line).find()) return true;
    return false;
  }

  /**
   * The deliberate extensions docs/LAYOUT.md lists for a kind: rows of its
   * table "Deliberate extensions" (`| kind | `key or channel` | why |`),
   * NAME standing for the name (each of a multilock's names, comma-separated)
   * and `<client-id>` for any client's label; a dump line about that key or
   * channel is not a difference.
   */
  static List<Pattern> extensions(String kind, String names) throws IOException {
    Path doc = Path.of(System.getProperty("dlock.layout", "../../../docs/LAYOUT.md"));
    List<String> lines = Files.readAllLines(doc);
    List<Pattern> out = new ArrayList<>();
    boolean in = false;
    Pattern row = Pattern.compile("^\\|\\s*([^|]+?)\\s*\\|\\s*`([^`]+)`\\s*\\|");
    for (String l : lines) {
      if (l.startsWith("#")) in = l.contains("Deliberate extensions");
      if (!in) continue;
      Matcher m = row.matcher(l);
      if (m.find() && (List.of(m.group(1).split(",\\s*")).contains(kind)
          || m.group(1).equals("every kind"))) {
        for (String name : names.split(",")) { // a multilock's members
          // <client-id> stands for any client's label
          String[] parts = m.group(2).replace("NAME", name).split("<client-id>", -1);
          StringBuilder k = new StringBuilder();
          for (int i = 0; i < parts.length; i++)
            k.append(i > 0 ? "CLIENT[0-9]+" : "").append(Pattern.quote(parts[i]));
          out.add(Pattern.compile("^(key|pub) " + k + "( |$)"));
        }
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- a twin

  /** One twin server: a raw connection for dumps, one for PSUBSCRIBE *. */
  static final class Twin implements AutoCloseable {
    final Raw cmd, sub;
    final BlockingQueue<List<String>> messages = new LinkedBlockingQueue<>();
    final Map<String, String> labels = new LinkedHashMap<>(); // raw bytes or text -> label
    final Map<String, String> ids = new LinkedHashMap<>(); // label -> hex id
    final Thread reader;
    int marker;
    long stepStart; // server ms when the current step began
    /** key + member -> {score, server ms of the step that set it}. */
    final Map<String, long[]> scored = new LinkedHashMap<>();

    Twin(String url) throws IOException {
      cmd = new Raw(url);
      sub = new Raw(url);
      sub.send("PSUBSCRIBE", "*");
      reader = new Thread(() -> {
        try {
          for (;;) {
            Object m = sub.read();
            if (m instanceof List<?> l && l.size() == 4 && "pmessage".equals(l.get(0)))
              messages.add(List.of((String) l.get(2), (String) l.get(3)));
          }
        } catch (IOException e) {
          // closed
        }
      }, "psubscribe " + url);
      reader.setDaemon(true);
      reader.start();
    }

    void flush() throws Exception {
      cmd.call("FLUSHALL");
      drainMessages();
      labels.clear();
      ids.clear();
      scored.clear();
    }

    /** A permit id (32 hex digits) is P<n> stored as its 16 bytes, and
     *  "P<n>(as hex text)" stored as the digits, so the form shows. */
    void label(String hex, String label) {
      assertNotNull(hex, label + ": no permit");
      ids.put(label, hex);
      labels.put(new String(HexFormat.of().parseHex(hex), StandardCharsets.ISO_8859_1), label);
      labels.put(hex, label + "(as hex text)"); // another form, another label
    }

    String id(String label) { return ids.get(label); }

    void begin() throws IOException { stepStart = now(); }

    /** Waits (bounded) until the server's clock is past permit label's expiry. */
    void awaitExpired(String name, String label) throws Exception {
      String member = new String(HexFormat.of().parseHex(ids.get(label)), StandardCharsets.ISO_8859_1);
      long end = System.nanoTime() + 10_000_000_000L;
      while (System.nanoTime() < end) {
        Object sc = cmd.call("ZSCORE", "{" + name + "}:timeout", member);
        if (sc == null || Long.parseLong((String) sc) < now()) return;
        Thread.sleep(20);
      }
      fail(label + " did not expire within 10 s");
    }

    long now() throws IOException {
      @SuppressWarnings("unchecked")
      List<Object> t = (List<Object>) cmd.call("TIME");
      return Long.parseLong((String) t.get(0)) * 1000 + Long.parseLong((String) t.get(1)) / 1000;
    }

    /** The messages published since the last call, up to a marker of ours. */
    List<List<String>> drainMessages() throws Exception {
      String mark = "conformance-marker-" + (++marker);
      cmd.call("PUBLISH", "conformance-marker", mark);
      List<List<String>> out = new ArrayList<>();
      for (int i = 0; i < 10_000; i++) {
        List<String> m = messages.poll(10, TimeUnit.SECONDS);
        if (m == null) fail("the marker " + mark + " never came back");
        if (m.get(0).equals("conformance-marker")) {
          if (m.get(1).equals(mark)) return out;
          continue;
        }
        out.add(m);
      }
      fail("no marker among 10000 messages");
      return out;
    }

    /** The whole state, normalised, one line per fact, sorted per key. */
    @SuppressWarnings("unchecked")
    List<String> dump() throws Exception {
      List<String> out = new ArrayList<>();
      for (List<String> m : drainMessages())
        out.add("pub " + norm(m.get(0)) + " " + norm(m.get(1)));
      List<Object> keys = (List<Object>) cmd.call("KEYS", "*");
      List<String> names = new ArrayList<>();
      for (Object k : keys) names.add((String) k);
      Collections.sort(names);
      for (String k : names) {
        String type = (String) cmd.call("TYPE", k);
        long pttl = (Long) cmd.call("PTTL", k);
        String ttl = pttl < 0 ? "none" : Math.round(pttl / 1000.0) + "s";
        String shown = norm(k);
        Matcher latch = UNLOCK_LATCH.matcher(k);
        if (latch.matches()) {
          // a release's request id (random) and TTL (each client's own
          // timeouts; Redisson's with its retry jitter): normalised
          shown = latch.group(1) + "<request-id>";
          ttl = pttl < 0 ? "none" : "client-timeouts";
        }
        String head = "key " + shown + " " + type;
        out.add(head + " ttl=" + ttl);
        List<String> body = new ArrayList<>();
        switch (type) {
          case "string" -> body.add(norm((String) cmd.call("GET", k)));
          case "hash" -> {
            List<Object> h = (List<Object>) cmd.call("HGETALL", k);
            for (int i = 0; i < h.size(); i += 2)
              body.add(norm((String) h.get(i)) + " = " + norm((String) h.get(i + 1)));
            Collections.sort(body);
          }
          case "zset" -> {
            List<Object> z = (List<Object>) cmd.call("ZRANGE", k, "0", "-1", "WITHSCORES");
            for (int i = 0; i < z.size(); i += 2)
              body.add(norm((String) z.get(i)) + " @ " + score(k, (String) z.get(i), (String) z.get(i + 1)));
            Collections.sort(body); // the order by score is the scores'
          }
          case "list" -> {
            List<Object> l = (List<Object>) cmd.call("LRANGE", k, "0", "-1");
            for (int i = 0; i < l.size(); i++) body.add("[" + i + "] " + norm((String) l.get(i)));
          }
          case "set" -> {
            for (Object x : (List<Object>) cmd.call("SMEMBERS", k)) body.add(norm((String) x));
            Collections.sort(body);
          }
          default -> body.add("(" + type + ")");
        }
        for (String x : body) out.add(head + " " + x);
      }
      return out;
    }

    private static final Pattern UNLOCK_LATCH =
        Pattern.compile("(redisson_unlock_latch:\\{.*\\}:)[^:]+");
    private static final Pattern OWNER =
        Pattern.compile("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(:\\d+)?");

    /** Labels for known permit ids and for lock owners (uuid[:thread]). */
    String norm(String s) {
      if (s == null) return "(nil)";
      String l = labels.get(s);
      if (l != null) return l;
      Matcher m = OWNER.matcher(s);
      StringBuilder b = new StringBuilder();
      while (m.find()) {
        // numbered per kind of label, so that no other label shifts it
        String who = labels.computeIfAbsent(m.group(), x -> {
          String kind = x.indexOf(':') >= 0 ? "OWNER" : "CLIENT";
          return kind + (labels.values().stream()
              .filter(v -> v.matches(kind + "[0-9]+")).count() + 1);
        });
        m.appendReplacement(b, who);
      }
      m.appendTail(b);
      String r = b.toString();
      for (int i = 0; i < r.length(); i++)
        if (r.charAt(i) < 32 || r.charAt(i) > 126) return "0x" + HexFormat.of().formatHex(r.getBytes(StandardCharsets.ISO_8859_1));
      return r;
    }

    /**
     * A score: Redisson's no-lease sentinel; a timestamp (past 10^12 ms) as
     * its distance from the start of the step that set it ("set+60s": a
     * 60 s lease, whatever the steps since took on this twin); else as is.
     */
    String score(String key, String member, String s) {
      double v = Double.parseDouble(s);
      if (v >= NO_LEASE) return "no-lease";
      if (v <= 1e12) return s;
      long[] seen = scored.get(key + "\0" + member);
      if (seen == null || seen[0] != (long) v) {
        seen = new long[] {(long) v, stepStart};
        scored.put(key + "\0" + member, seen);
      }
      long d = (long) v - seen[1];
      return "set" + (d >= 0 ? "+" : "-") + Math.round(Math.abs(d) / 1000.0) + "s";
    }

    @Override
    public void close() throws IOException {
      cmd.close();
      sub.close();
    }
  }

  /** A binary-safe RESP connection (one char per byte). */
  static final class Raw implements AutoCloseable {
    private final Socket s;
    private final OutputStream out;
    private final InputStream in;

    Raw(String url) throws IOException {
      URI u = URI.create(url);
      s = new Socket(u.getHost(), u.getPort());
      out = s.getOutputStream();
      in = new BufferedInputStream(s.getInputStream());
    }

    void send(String... args) throws IOException {
      StringBuilder b = new StringBuilder("*" + args.length + "\r\n");
      for (String a : args) b.append('$').append(a.length()).append("\r\n").append(a).append("\r\n");
      out.write(b.toString().getBytes(StandardCharsets.ISO_8859_1));
      out.flush();
    }

    synchronized Object call(String... args) throws IOException {
      send(args);
      return read();
    }

    private String line() throws IOException {
      StringBuilder b = new StringBuilder();
      int c;
      while ((c = in.read()) != '\r') {
        if (c < 0) throw new IOException("connection closed");
        b.append((char) c);
      }
      in.read();
      return b.toString();
    }

    Object read() throws IOException {
      String l = line();
      String r = l.substring(1);
      switch (l.charAt(0)) {
        case '+': return r;
        case '-': throw new IOException("redis: " + r);
        case ':': return Long.parseLong(r);
        case '$': {
          int n = Integer.parseInt(r);
          if (n < 0) return null;
          byte[] x = in.readNBytes(n + 2);
          return new String(x, 0, n, StandardCharsets.ISO_8859_1);
        }
        case '*': {
          int n = Integer.parseInt(r);
          if (n < 0) return null;
          List<Object> a = new ArrayList<>();
          for (int i = 0; i < n; i++) a.add(read());
          return a;
        }
        default: throw new IOException("bad reply " + l);
      }
    }

    @Override public void close() throws IOException { s.close(); }
  }
}
