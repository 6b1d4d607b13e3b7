package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryNTimes;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInfo;

/**
 * What every Curator interop test needs: the private ZooKeeper's URL, dlock
 * processes (the command and the C helper dlock_interop), Curator clients,
 * and bounded waits. Everything a test starts is stopped after it:
 * processes by their own handle, Curator clients by close().
 */
abstract class Env {
  /** zookeeper://127.0.0.1:P, for dlock. */
  static final String URL = prop("dlock.zk", "DLOCK_ZK_URL");
  /** 127.0.0.1:P, for Curator. */
  static final String HOSTS = URL.substring("zookeeper://".length());
  static final String DLOCK = prop("dlock.bin", "DLOCK_BIN");
  static final String HELPER = prop("dlock.helper", "DLOCK_HELPER");
  /** Where dlock puts a lock NAME that is not a path (docs/ZOOKEEPER.md). */
  static final String BASE = "/dlock/locks/";
  /** A wake-up must come well within this; every wait is longer. */
  static final long BOUND_MS = 20_000;

  private final List<Proc> procs = new ArrayList<>();
  private final List<CuratorFramework> clients = new ArrayList<>();
  String name;

  static String prop(String p, String env) {
    String v = System.getProperty(p);
    if (v == null || v.isEmpty()) v = System.getenv(env);
    if (v == null || v.isEmpty())
      throw new IllegalStateException(p + " is not set: run tests/interop/curator/run.sh");
    return v;
  }

  @BeforeEach
  void setUpName(TestInfo info) {
    String m = info.getTestMethod().map(x -> x.getName()).orElse("t");
    name = "it-" + getClass().getSimpleName() + "-" + m + "-" + System.nanoTime();
  }

  @AfterEach
  void tearDown() throws Exception {
    for (Proc p : procs) p.kill();
    for (CuratorFramework c : clients) c.close();
  }

  /** A started Curator client, connected. */
  CuratorFramework curator() throws InterruptedException {
    CuratorFramework c = CuratorFrameworkFactory.newClient(
        HOSTS, 60_000, 15_000, new RetryNTimes(3, 100));
    c.start();
    clients.add(c);
    assertTrue(c.blockUntilConnected(20, TimeUnit.SECONDS), "Curator did not connect");
    return c;
  }

  /** Starts ARGS with DLOCK_URL set; stdout is read line by line. */
  Proc start(String... args) throws IOException {
    ProcessBuilder pb = new ProcessBuilder(args);
    pb.environment().put("DLOCK_URL", URL);
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    Proc p = new Proc(pb.start(), String.join(" ", args));
    procs.add(p);
    return p;
  }

  /** `dlock OPTS... NAME CMD` where CMD says "held <token>" and holds until stdin closes. */
  Proc dlockHold(String lockName, String... opts) throws IOException {
    List<String> a = new ArrayList<>();
    a.add(DLOCK);
    for (String o : opts) a.add(o);
    a.add(lockName);
    a.add("sh");
    a.add("-c");
    a.add("echo \"held ${DLOCK_TOKEN:-}\"; read x; exit 0");
    return start(a.toArray(new String[0]));
  }

  /** Runs `dlock ARGS...` to its end (bounded); its exit status. */
  int dlockRun(String... args) throws Exception {
    String[] a = new String[args.length + 1];
    a[0] = DLOCK;
    System.arraycopy(args, 0, a, 1, args.length);
    Proc p = start(a);
    p.closeStdin();
    return p.waitExit(BOUND_MS);
  }

  /** Runs `dlock ARGS...` to its end (bounded); its standard output. */
  String dlockOut(String... args) throws Exception {
    String[] a = new String[args.length + 1];
    a[0] = DLOCK;
    System.arraycopy(args, 0, a, 1, args.length);
    Proc p = start(a);
    p.closeStdin();
    p.waitExit(BOUND_MS);
    return String.join("\n", p.drain());
  }

  /** The C helper (dlock_interop), a line in, a line out. */
  Proc helper() throws IOException { return start(HELPER, URL); }

  static final class Proc {
    final Process p;
    final String what;
    final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    private final Writer in;
    private final Thread reader;

    Proc(Process p, String what) {
      this.p = p;
      this.what = what;
      this.in = new OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8);
      Thread t = new Thread(() -> {
        try (BufferedReader r = new BufferedReader(
                 new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
          String l;
          while ((l = r.readLine()) != null) lines.add(l);
        } catch (IOException e) {
          // the process went away
        }
      }, "stdout " + what);
      t.setDaemon(true);
      t.start();
      reader = t;
    }

    String line(long ms) throws InterruptedException {
      String l = lines.poll(ms, TimeUnit.MILLISECONDS);
      if (l == null) fail("no output from `" + what + "` within " + ms + " ms");
      return l;
    }

    String lineOrNull(long ms) throws InterruptedException {
      return lines.poll(ms, TimeUnit.MILLISECONDS);
    }

    String cmd(String line, long ms) throws Exception {
      send(line);
      return line(ms);
    }

    void send(String line) throws IOException {
      in.write(line + "\n");
      in.flush();
    }

    long awaitHeld(long ms) throws InterruptedException {
      String l = line(ms);
      assertTrue(l.startsWith("held"), "`" + what + "` said " + l);
      String t = l.substring(4).trim();
      return t.isEmpty() ? -1 : Long.parseLong(t);
    }

    List<String> drain() {
      List<String> out = new ArrayList<>();
      lines.drainTo(out);
      return out;
    }

    boolean alive() { return p.isAlive(); }

    void closeStdin() throws IOException { in.close(); }

    int waitExit(long ms) throws InterruptedException {
      if (!p.waitFor(ms, TimeUnit.MILLISECONDS)) fail("`" + what + "` still running after " + ms + " ms");
      reader.join(ms);
      return p.exitValue();
    }

    void kill() throws InterruptedException {
      if (!p.isAlive()) return;
      p.destroy();
      if (!p.waitFor(5, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        p.waitFor(5, TimeUnit.SECONDS);
      }
    }
  }
}
