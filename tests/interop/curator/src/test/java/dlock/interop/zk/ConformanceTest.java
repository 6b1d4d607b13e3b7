package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.zookeeper.data.Stat;
import org.junit.jupiter.api.Test;

/**
 * Layout conformance against Curator: one scripted sequence per recipe
 * runs twice on the suite's ZooKeeper, in two fresh subtrees (the twins):
 * once driven by Curator, once by dlock (dlock_interop, on a full path).
 * After every step the recipe's whole subtree is dumped: each node's path
 * under the recipe (protected ids, owners and sessions as labels in order
 * of appearance, each kind numbered on its own, so that a label never
 * depends on what the data held; sequence numbers as they are) with its
 * kind (persistent, container, or ephemeral with the session as a label),
 * and on a line of its own its data (null and empty alike). The dumps must
 * be identical, except for lines docs/ZOOKEEPER.md's "Deliberate
 * differences" table lists for the recipe (by their start, or `seq P`:
 * lines under P that differ only in their sequence numbers).
 */
class ConformanceTest extends Env {
  private String ok(Proc helper, String line) throws Exception {
    String a = helper.cmd(line, BOUND_MS);
    assertTrue(a.startsWith("ok"), "dlock_interop `" + line + "`: " + a);
    return a.length() > 3 ? a.substring(3) : "";
  }

  interface Action { void run() throws Exception; }

  @Test
  void semaphoreV2() throws Exception {
    String root = "/conf-" + System.nanoTime();
    String cp = root + "-curator/sem", dp = root + "-dlock/sem";
    CuratorFramework c = curator();
    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, cp, 2);
    Proc d = helper();
    Script k = new Script("InterProcessSemaphoreV2", c, cp, dp);
    Lease[] cl = new Lease[2];
    String[] dl = new String[2];
    k.step("the count: none for Curator (maxLeases is each process's), try_set_permits(2) for dlock",
        () -> {}, () -> assertEquals("set", ok(d, "psem-set " + dp + " 2")));
    k.step("acquire (L1)", () -> cl[0] = s.acquire(5, TimeUnit.SECONDS),
        () -> dl[0] = ok(d, "psem-acquire " + dp + " -1"));
    k.step("acquire (L2)", () -> cl[1] = s.acquire(5, TimeUnit.SECONDS),
        () -> dl[1] = ok(d, "psem-acquire " + dp + " -1"));
    k.step("try acquire, none free", () -> assertNull(s.acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d.cmd("psem-acquire " + dp + " -1", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("return L1", () -> s.returnLease(cl[0]), () -> ok(d, "psem-release " + dp + " " + dl[0]));
    k.step("return L2", () -> s.returnLease(cl[1]), () -> ok(d, "psem-release " + dp + " " + dl[1]));
    k.check();
  }

  @Test
  @SuppressWarnings("unchecked")
  void mutex() throws Exception {
    String root = "/conf-" + System.nanoTime();
    String cp = root + "-curator/mutex", dp = root + "-dlock/mutex";
    CuratorFramework c = curator();
    InterProcessMutex m = new InterProcessMutex(c, cp);
    CuratorFramework[] otherClient = {curator()};
    InterProcessMutex other = new InterProcessMutex(otherClient[0], cp);
    Proc d = helper();
    Proc d2 = helper();
    Script k = new Script("InterProcessMutex", c, cp, dp);
    k.step("acquire", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)), () -> ok(d, "lock " + dp + " 0"));
    k.step("acquire again (re-enter)", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)),
        () -> ok(d, "lock " + dp + " 0"));
    k.step("another client's try fails", () -> assertTrue(!other.acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d2.cmd("lock " + dp + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("release (held once more)", () -> m.release(), () -> ok(d, "unlock " + dp));
    // a waiter, the hand-off, and a holder whose session ends
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newSingleThreadExecutor();
    try {
      java.util.concurrent.Future<Boolean>[] w = new java.util.concurrent.Future[1];
      k.step("another client waits (its node queues behind)", () -> {
        w[0] = pool.submit(() -> other.acquire(30, TimeUnit.SECONDS));
        awaitChildren(c, cp, 2);
      }, () -> {
        d2.send("lock " + dp + " 30000");
        awaitChildren(c, dp, 2);
      });
      k.step("release: the waiter gets it", () -> {
        m.release();
        assertTrue(w[0].get(BOUND_MS, TimeUnit.MILLISECONDS));
      }, () -> {
        ok(d, "unlock " + dp);
        assertTrue(d2.line(BOUND_MS).startsWith("ok"), "dlock's waiter");
      });
      CuratorFramework c3 = curator();
      InterProcessMutex third = new InterProcessMutex(c3, cp);
      Proc d3 = helper();
      k.step("a third client waits", () -> {
        w[0] = pool.submit(() -> third.acquire(30, TimeUnit.SECONDS));
        awaitChildren(c, cp, 2);
      }, () -> {
        d3.send("lock " + dp + " 30000");
        awaitChildren(c, dp, 2);
      });
      k.step("the holder's session ends (client closed): the third gets it", () -> {
        otherClient[0].close();
        assertTrue(w[0].get(BOUND_MS, TimeUnit.MILLISECONDS));
      }, () -> {
        d2.closeStdin(); // the helper frees its client: the session closes
        assertEquals(0, d2.waitExit(BOUND_MS));
        assertTrue(d3.line(BOUND_MS).startsWith("ok"), "dlock's third client");
      });
      // Curator's locks are per thread: the pool's thread took it
      k.step("release (free)", () -> pool.submit(() -> { third.release(); return null; })
          .get(BOUND_MS, TimeUnit.MILLISECONDS), () -> ok(d3, "unlock " + dp));
    } finally {
      pool.shutdownNow();
    }
    k.check();
  }

  /** Waits (bounded) until path has n children. */
  static void awaitChildren(CuratorFramework c, String path, int n) throws Exception {
    long end = System.nanoTime() + BOUND_MS * 1_000_000L;
    while (c.getChildren().forPath(path).size() != n) {
      assertTrue(System.nanoTime() < end, path + ": not " + n + " children within " + BOUND_MS + " ms");
      Thread.sleep(10);
    }
  }

  @Test
  void semaphoreMutex() throws Exception {
    // InterProcessSemaphoreMutex is InterProcessSemaphoreV2 with maxLeases
    // 1: dlock's counterpart is the permit semaphore of 1 permit
    String root = "/conf-" + System.nanoTime();
    String cp = root + "-curator/smutex", dp = root + "-dlock/smutex";
    CuratorFramework c = curator();
    InterProcessSemaphoreMutex m = new InterProcessSemaphoreMutex(c, cp);
    InterProcessSemaphoreMutex other = new InterProcessSemaphoreMutex(curator(), cp);
    Proc d = helper();
    Proc d2 = helper();
    Script k = new Script("InterProcessSemaphoreMutex", c, cp, dp);
    String[] dl = new String[1];
    k.step("the count: none for Curator, try_set_permits(1) for dlock", () -> {},
        () -> assertEquals("set", ok(d, "psem-set " + dp + " 1")));
    k.step("acquire", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)),
        () -> dl[0] = ok(d, "psem-acquire " + dp + " -1"));
    k.step("another client's try fails", () -> assertTrue(!other.acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d2.cmd("psem-acquire " + dp + " -1", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("release", () -> m.release(), () -> ok(d, "psem-release " + dp + " " + dl[0]));
    k.step("the other client acquires", () -> assertTrue(other.acquire(5, TimeUnit.SECONDS)),
        () -> dl[0] = ok(d2, "psem-acquire " + dp + " -1"));
    k.step("the other client releases", () -> other.release(),
        () -> ok(d2, "psem-release " + dp + " " + dl[0]));
    k.check();
  }

  @Test
  void readWriteLock() throws Exception {
    String root = "/conf-" + System.nanoTime();
    String cp = root + "-curator/rw", dp = root + "-dlock/rw";
    CuratorFramework c = curator();
    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, cp);
    InterProcessReadWriteLock rw2 = new InterProcessReadWriteLock(curator(), cp);
    InterProcessReadWriteLock rw3 = new InterProcessReadWriteLock(curator(), cp);
    Proc d = helper();
    Proc d2 = helper();
    Proc d3 = helper();
    Script k = new Script("InterProcessReadWriteLock", c, cp, dp);
    k.step("write lock", () -> assertTrue(rw.writeLock().acquire(5, TimeUnit.SECONDS)),
        () -> ok(d, "write " + dp + " 0"));
    k.step("another client's read try fails", () -> assertTrue(!rw2.readLock().acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d2.cmd("read " + dp + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("the writer takes the read side too (downgrade)",
        () -> assertTrue(rw.readLock().acquire(5, TimeUnit.SECONDS)), () -> ok(d, "read " + dp + " 0"));
    k.step("the writer releases the write side: it reads", () -> rw.writeLock().release(),
        () -> ok(d, "unwrite " + dp));
    k.step("another client reads beside it", () -> assertTrue(rw2.readLock().acquire(5, TimeUnit.SECONDS)),
        () -> ok(d2, "read " + dp + " 0"));
    k.step("a third client's write try fails", () -> assertTrue(!rw3.writeLock().acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d3.cmd("write " + dp + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("the first reader releases", () -> rw.readLock().release(), () -> ok(d, "unread " + dp));
    k.step("the other reader releases (free)", () -> rw2.readLock().release(), () -> ok(d2, "unread " + dp));
    k.step("the third client writes", () -> assertTrue(rw3.writeLock().acquire(5, TimeUnit.SECONDS)),
        () -> ok(d3, "write " + dp + " 0"));
    k.step("it releases (free)", () -> rw3.writeLock().release(), () -> ok(d3, "unwrite " + dp));
    k.check();
  }

  @Test
  void multiLock() throws Exception {
    // InterProcessMultiLock is InterProcessMutex on each path, taken in
    // order, all or nothing; dlock's multilock of reentrant locks on the
    // same paths (dlock_multilock_*)
    String root = "/conf-" + System.nanoTime();
    String cp = root + "-curator/multi", dp = root + "-dlock/multi";
    CuratorFramework c = curator();
    CuratorFramework c2 = curator();
    InterProcessMultiLock m = new InterProcessMultiLock(c, List.of(cp + "/a", cp + "/b"));
    InterProcessMultiLock other = new InterProcessMultiLock(c2, List.of(cp + "/a", cp + "/b"));
    InterProcessMutex otherB = new InterProcessMutex(c2, cp + "/b");
    Proc d = helper();
    Proc d2 = helper();
    String dm = dp + "/a," + dp + "/b";
    Script k = new Script("InterProcessMultiLock", c, cp, dp);
    k.step("acquire a and b", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)), () -> ok(d, "multi " + dm + " 0"));
    k.step("another client's try fails (at a)", () -> assertTrue(!other.acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d2.cmd("multi " + dm + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("release both", () -> m.release(), () -> ok(d, "unmulti " + dm));
    k.step("the other client holds b alone", () -> assertTrue(otherB.acquire(5, TimeUnit.SECONDS)),
        () -> ok(d2, "lock " + dp + "/b 0"));
    k.step("the try fails at b and gives a back", () -> assertTrue(!m.acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d.cmd("multi " + dm + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("the other client releases b", () -> otherB.release(), () -> ok(d2, "unlock " + dp + "/b"));
    k.step("acquire a and b", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)), () -> ok(d, "multi " + dm + " 0"));
    k.step("release both", () -> m.release(), () -> ok(d, "unmulti " + dm));
    k.check();
  }

  /** The steps of one recipe: each run on both subtrees, dumped, compared. */
  final class Script {
    final String kind, cp, dp;
    final CuratorFramework look;
    final List<String> diffs = new ArrayList<>();
    final List<String> log = new ArrayList<>();
    final Map<String, String> labelsC = new HashMap<>(), labelsD = new HashMap<>();

    Script(String kind, CuratorFramework look, String cp, String dp) {
      this.kind = kind;
      this.look = look;
      this.cp = cp;
      this.dp = dp;
    }

    void step(String what, Action curator, Action dlock) throws Exception {
      curator.run();
      List<String> a = dump(cp, labelsC);
      dlock.run();
      List<String> b = dump(dp, labelsD);
      log.add("== " + what);
      List<String> onlyC = new ArrayList<>(a), onlyD = new ArrayList<>(b);
      onlyC.removeAll(b);
      onlyD.removeAll(a);
      List<Pattern> ext = differences(kind);
      // a `seq P` row: lines under P that differ only in their sequence
      // numbers pair up
      List<String> seqC = new ArrayList<>(), seqD = new ArrayList<>();
      for (String x : onlyC) seqC.add(seqFree(kind, x));
      for (String x : onlyD) seqD.add(seqFree(kind, x));
      for (int i = 0; i < onlyC.size(); i++)
        if (!listed(ext, onlyC.get(i)) && (seqC.get(i) == null || !seqD.contains(seqC.get(i))))
          diffs.add(what + ": Curator only: " + onlyC.get(i));
      for (int i = 0; i < onlyD.size(); i++)
        if (!listed(ext, onlyD.get(i)) && (seqD.get(i) == null || !seqC.contains(seqD.get(i))))
          diffs.add(what + ": dlock only:   " + onlyD.get(i));
      for (String x : a) log.add("  " + (onlyC.contains(x) ? "C " : "  ") + x);
      for (String x : onlyD) log.add("  D " + x);
    }

    void check() {
      System.out.println("conformance " + kind + " (C: Curator only, D: dlock only)\n" + String.join("\n", log));
      if (!diffs.isEmpty())
        fail(kind + ": the trees differ where docs/ZOOKEEPER.md lists no deliberate difference:\n  "
            + String.join("\n  ", diffs));
    }

    private final Pattern protectedName = Pattern.compile("^_c_([0-9a-f-]{36})-(.*)$");
    private final Pattern uuid =
        Pattern.compile("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");

    /** id's label: prefix and its rank among the ids of that prefix. */
    private String label(Map<String, String> labels, String prefix, String id) {
      return labels.computeIfAbsent(prefix + ":" + id, x -> prefix
          + (labels.keySet().stream().filter(k -> k.startsWith(prefix + ":")).count() + 1));
    }

    /** The subtree at path (path itself shown as "."), one line per fact. */
    List<String> dump(String path, Map<String, String> labels) throws Exception {
      List<String> out = new ArrayList<>();
      walk(path, ".", labels, out);
      return out;
    }

    private void walk(String path, String shown, Map<String, String> labels, List<String> out)
        throws Exception {
      Stat st = look.checkExists().forPath(path);
      if (st == null) return;
      byte[] data;
      List<String> kids;
      try {
        data = look.getData().forPath(path);
        kids = new ArrayList<>(look.getChildren().forPath(path));
      } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
        return;
      }
      long owner = st.getEphemeralOwner();
      String type = owner == Long.MIN_VALUE ? "container"
          : owner != 0 ? "ephemeral(" + label(labels, "S", Long.toHexString(owner)) + ")" : "persistent";
      // null data (dlock's parents) and empty data (Curator's) read alike
      String text = data == null ? "" : new String(data, StandardCharsets.UTF_8);
      Matcher u = uuid.matcher(text);
      StringBuilder b = new StringBuilder();
      while (u.find()) u.appendReplacement(b, label(labels, "U", u.group()));
      u.appendTail(b);
      out.add("node " + shown + " " + type);
      out.add("data " + shown + " = " + b);
      Collections.sort(kids);
      for (String kid : kids) {
        Matcher m = protectedName.matcher(kid);
        String name = m.matches() ? "_c_" + label(labels, "ID", m.group(1)) + "-" + m.group(2) : kid;
        walk(path + "/" + kid, shown.equals(".") ? name : shown + "/" + name, labels, out);
      }
    }
  }

  /**
   * line with its 10-digit sequence numbers blanked, when docs/ZOOKEEPER.md
   * has a row `seq P` for the kind and the line is about a node under P;
   * else null.
   */
  static String seqFree(String kind, String line) {
    try {
      for (Pattern p : differences(kind)) {
        String q = p.pattern();
        if (!q.startsWith("^\\Qseq ")) continue;
        String under = q.substring("^\\Qseq ".length(), q.length() - "\\E".length());
        Matcher m = Pattern.compile("^(node|data) " + Pattern.quote(under)).matcher(line);
        if (m.find()) return line.replaceAll("[0-9]{10}", "##########");
      }
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
    return null;
  }

  private static boolean listed(List<Pattern> ps, String line) {
    for (Pattern p : ps)
      if (p.matcher(line).find()) return true;
    return false;
  }

  /**
   * Rows of docs/ZOOKEEPER.md's table "Deliberate differences"
   * (`| recipe | `dump line start` | why |`): a dump line starting so is not
   * a difference.
   */
  static List<Pattern> differences(String kind) throws Exception {
    Path doc = Path.of(System.getProperty("dlock.zookeeper_md", "../../../docs/ZOOKEEPER.md"));
    List<Pattern> out = new ArrayList<>();
    boolean in = false;
    Pattern row = Pattern.compile("^\\|\\s*([^|]+?)\\s*\\|\\s*`([^`]+)`\\s*\\|");
    for (String l : Files.readAllLines(doc)) {
      if (l.startsWith("#")) in = l.contains("Deliberate differences");
      if (!in) continue;
      Matcher m = row.matcher(l);
      if (m.find() && List.of(m.group(1).split(",\\s*")).contains(kind))
        out.add(Pattern.compile("^" + Pattern.quote(m.group(2))));
    }
    return out;
  }
}
