package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInfo;
import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * What every interop test needs: the private server's URL, dlock processes
 * (the command and the C helper dlock_interop), Redisson clients, a raw RESP
 * connection to look at the keys, and bounded polling. Everything a test
 * starts is stopped after it: processes by their own handle (pid),
 * Redisson clients by shutdown().
 */
abstract class Env {
  static final String URL = prop("dlock.url", "DLOCK_URL");
  static final String DLOCK = prop("dlock.bin", "DLOCK_BIN");
  static final String HELPER = prop("dlock.helper", "DLOCK_HELPER");
  /** "promptly": a wake-up must come well within this (leases are 30 s). */
  static final long PROMPT_MS = 2000;

  private final List<Proc> procs = new ArrayList<>();
  private final List<RedissonClient> clients = new ArrayList<>();
  private Resp resp;
  String name;

  static String prop(String p, String env) {
    String v = System.getProperty(p);
    if (v == null || v.isEmpty()) v = System.getenv(env);
    if (v == null || v.isEmpty())
      throw new IllegalStateException(p + " is not set: run tests/interop/run.sh");
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
    for (RedissonClient c : clients) c.shutdown(0, 2, TimeUnit.SECONDS);
    if (resp != null) resp.close();
  }

  // ------------------------------------------------------------ Redisson

  RedissonClient redisson() { return redisson(0); }

  /** A Redisson client; watchdogMs > 0 sets Config.setLockWatchdogTimeout. */
  RedissonClient redisson(long watchdogMs) {
    Config cfg = new Config();
    cfg.useSingleServer().setAddress(URL).setConnectionMinimumIdleSize(1)
        .setConnectionPoolSize(4).setSubscriptionConnectionMinimumIdleSize(1)
        .setSubscriptionConnectionPoolSize(4);
    if (watchdogMs > 0) cfg.setLockWatchdogTimeout(watchdogMs);
    RedissonClient c = Redisson.create(cfg);
    clients.add(c);
    return c;
  }

  // ------------------------------------------------------------ processes

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

  /** Runs `dlock ARGS...` to its end (bounded) and returns its exit status and output. */
  Result dlockRun(long boundMs, String... args) throws Exception {
    String[] a = new String[args.length + 1];
    a[0] = DLOCK;
    System.arraycopy(args, 0, a, 1, args.length);
    Proc p = start(a);
    p.closeStdin();
    int rc = p.waitExit(boundMs);
    return new Result(rc, String.join("\n", p.drain()));
  }

  record Result(int status, String out) {}

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

    /** The next stdout line, waiting at most ms; fails the test on timeout. */
    String line(long ms) throws InterruptedException {
      String l = lines.poll(ms, TimeUnit.MILLISECONDS);
      if (l == null) fail("no output from `" + what + "` within " + ms + " ms");
      return l;
    }

    /** The next line, or null after ms. */
    String lineOrNull(long ms) throws InterruptedException {
      return lines.poll(ms, TimeUnit.MILLISECONDS);
    }

    List<String> drain() {
      List<String> out = new ArrayList<>();
      lines.drainTo(out);
      return out;
    }

    /** Sends one line to the helper and returns its answer. */
    String cmd(String line, long ms) throws Exception {
      send(line);
      return line(ms);
    }

    void send(String line) throws IOException {
      in.write(line + "\n");
      in.flush();
    }

    /** Waits for "held [token]" from dlockHold; returns the token or -1. */
    long awaitHeld(long ms) throws InterruptedException {
      String l = line(ms);
      assertTrue(l.startsWith("held"), "`" + what + "` said " + l);
      String t = l.substring(4).trim();
      return t.isEmpty() ? -1 : Long.parseLong(t);
    }

    void closeStdin() throws IOException { in.close(); }

    int waitExit(long ms) throws InterruptedException {
      if (!p.waitFor(ms, TimeUnit.MILLISECONDS)) fail("`" + what + "` still running after " + ms + " ms");
      reader.join(ms); // every line it wrote is in `lines`
      return p.exitValue();
    }

    boolean alive() { return p.isAlive(); }

    void kill() throws InterruptedException {
      if (!p.isAlive()) return;
      p.destroy(); // SIGTERM: dlock releases and exits
      if (!p.waitFor(5, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        p.waitFor(5, TimeUnit.SECONDS);
      }
    }
  }

  // ------------------------------------------------------------ raw Redis

  /** A plain RESP connection for looking at keys and channels. */
  Resp redis() throws IOException {
    if (resp == null) resp = new Resp(URL);
    return resp;
  }

  static final class Resp implements AutoCloseable {
    private final Socket s;
    private final OutputStream out;
    private final InputStream in;
    /** Bulk strings as bytes: UTF-8 (the default) or one char per byte (binary: ISO-8859-1). */
    private final java.nio.charset.Charset cs;

    Resp(String url) throws IOException { this(url, false); }

    /** binary: replies and arguments one char per byte, so raw members survive. */
    Resp(String url, boolean binary) throws IOException {
      cs = binary ? StandardCharsets.ISO_8859_1 : StandardCharsets.UTF_8;
      URI u = URI.create(url);
      s = new Socket(u.getHost(), u.getPort());
      s.setSoTimeout(5000);
      out = s.getOutputStream();
      in = new java.io.BufferedInputStream(s.getInputStream());
    }

    synchronized Object call(String... args) throws IOException {
      StringBuilder b = new StringBuilder("*" + args.length + "\r\n");
      for (String a : args) {
        byte[] x = a.getBytes(cs);
        b.append('$').append(x.length).append("\r\n").append(a).append("\r\n");
      }
      out.write(b.toString().getBytes(cs));
      out.flush();
      return read();
    }

    long num(String... args) throws IOException { return (Long) call(args); }

    private String readLine() throws IOException {
      StringBuilder b = new StringBuilder();
      int c;
      while ((c = in.read()) != '\r') {
        if (c < 0) throw new IOException("connection closed");
        b.append((char) c);
      }
      in.read();
      return b.toString();
    }

    private Object read() throws IOException {
      String l = readLine();
      char t = l.charAt(0);
      String r = l.substring(1);
      switch (t) {
        case '+': return r;
        case '-': throw new IOException("redis: " + r);
        case ':': return Long.parseLong(r);
        case '$': {
          int n = Integer.parseInt(r);
          if (n < 0) return null;
          byte[] x = in.readNBytes(n + 2);
          return new String(x, 0, n, cs);
        }
        case '*': {
          int n = Integer.parseInt(r);
          if (n < 0) return null;
          List<Object> l2 = new ArrayList<>();
          for (int i = 0; i < n; i++) l2.add(read());
          return l2;
        }
        default: throw new IOException("bad reply " + l);
      }
    }

    /** Subscribers of a channel (PUBSUB NUMSUB). */
    long numsub(String channel) throws IOException {
      @SuppressWarnings("unchecked")
      List<Object> r = (List<Object>) call("PUBSUB", "NUMSUB", channel);
      return (Long) r.get(1);
    }

    @Override public void close() throws IOException { s.close(); }
  }

  // ------------------------------------------------------------ waiting

  /** Polls cond every 10 ms for at most ms; fails the test with what if it never holds. */
  static void waitFor(String what, long ms, BooleanSupplier cond) throws InterruptedException {
    long end = System.nanoTime() + ms * 1_000_000L;
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > end) fail("timed out after " + ms + " ms waiting for: " + what);
      Thread.sleep(10);
    }
  }

  interface IOBool { boolean get() throws Exception; }

  static BooleanSupplier io(IOBool b) {
    return () -> {
      try {
        return b.get();
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
  }

  static long ms(long t0) { return (System.nanoTime() - t0) / 1_000_000L; }

  // ------------------------------------------------------------ dlock --status --json

  /** The fields of `dlock --status --json NAME` this suite reads. */
  record Status(boolean held, String kind, List<String> owners, List<Long> counts,
                long leaseMs, String raw) {}

  Status status(String... args) throws Exception {
    String[] a = new String[args.length + 2];
    a[0] = "--status";
    a[1] = "--json";
    System.arraycopy(args, 0, a, 2, args.length);
    Result r = dlockRun(10_000, a);
    String j = r.out();
    Matcher held = Pattern.compile("\"held\"\\s*:\\s*(true|false)").matcher(j);
    assertTrue(held.find(), "no held in " + j);
    Matcher kind = Pattern.compile("\"kind\"\\s*:\\s*\"([^\"]*)\"").matcher(j);
    Matcher lease = Pattern.compile("\"lease_ms\"\\s*:\\s*(-?\\d+)").matcher(j);
    // owners: the holders array only (the "queue" array has owners too)
    int hs = j.indexOf("\"holders\""), he = j.indexOf("\"waiters\"");
    String hj = hs >= 0 && he > hs ? j.substring(hs, he) : j;
    Matcher owner = Pattern.compile("\"owner\"\\s*:\\s*\"([^\"]*)\"").matcher(hj);
    Matcher count = Pattern.compile("\"count\"\\s*:\\s*(\\d+)").matcher(j);
    List<String> owners = new ArrayList<>();
    while (owner.find()) owners.add(owner.group(1));
    List<Long> counts = new ArrayList<>();
    while (count.find()) counts.add(Long.parseLong(count.group(1)));
    boolean h = Boolean.parseBoolean(held.group(1));
    assertEquals(h ? 0 : 1, r.status(), "--status exit status for " + j);
    return new Status(h, kind.find() ? kind.group(1) : null, owners, counts,
        lease.find() ? Long.parseLong(lease.group(1)) : -2, j);
  }

  static void notNull(Object o, String what) { assertNotNull(o, what); }
}
