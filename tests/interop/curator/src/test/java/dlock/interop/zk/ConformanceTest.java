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
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.zookeeper.data.Stat;
import org.junit.jupiter.api.Test;

/**
 * Layout conformance against Curator: one scripted sequence per recipe
 * runs twice on the suite's ZooKeeper, in two fresh subtrees (the twins):
 * once driven by Curator, once by dlock (dlock_interop, on a full path).
 * After every step the recipe's whole subtree is dumped: each node's path
 * under the recipe (protected ids and owners as labels in order of
 * appearance, sequence numbers as they are) with its kind (persistent,
 * container, or ephemeral with the session as a label), and on a line of
 * its own its data (null and empty alike). The
 * dumps must be identical, except for paths docs/ZOOKEEPER.md's
 * "Deliberate differences" table lists for the recipe.
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
  void mutex() throws Exception {
    String root = "/conf-" + System.nanoTime();
    String cp = root + "-curator/mutex", dp = root + "-dlock/mutex";
    CuratorFramework c = curator();
    InterProcessMutex m = new InterProcessMutex(c, cp);
    InterProcessMutex other = new InterProcessMutex(curator(), cp);
    Proc d = helper();
    Proc d2 = helper();
    Script k = new Script("InterProcessMutex", c, cp, dp);
    k.step("acquire", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)), () -> ok(d, "lock " + dp + " 0"));
    k.step("acquire again (re-enter)", () -> assertTrue(m.acquire(5, TimeUnit.SECONDS)),
        () -> ok(d, "lock " + dp + " 0"));
    k.step("another client's try fails", () -> assertTrue(!other.acquire(0, TimeUnit.MILLISECONDS)),
        () -> assertTrue(d2.cmd("lock " + dp + " 0", BOUND_MS).startsWith("err DLOCK_EBUSY")));
    k.step("release (held once more)", () -> m.release(), () -> ok(d, "unlock " + dp));
    k.step("release (free)", () -> m.release(), () -> ok(d, "unlock " + dp));
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
      for (String x : onlyC)
        if (!listed(ext, x)) diffs.add(what + ": Curator only: " + x);
      for (String x : onlyD)
        if (!listed(ext, x)) diffs.add(what + ": dlock only:   " + x);
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

    private String label(Map<String, String> labels, String prefix, String id) {
      return labels.computeIfAbsent(prefix + id, x -> prefix + (labels.size() + 1));
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
