package dlock.interop.zk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Mixed races, per recipe: 2 Curator threads (one client each) and 2 dlock
 * processes (dlock_interop's `count`) each add 1 to a counter file 50 times
 * under the recipe, all at once. The total must be exactly 200 (a lost
 * update means two holders at once). Every increment also appends
 * "<who> <token>" to FILE.log; how often the holder switched between
 * Curator and dlock is printed, not asserted (it depends on scheduling).
 * Curator's recipes give no fencing token, so none is compared. Bounded:
 * every wait 10 s, the whole class by @Timeout.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class MixedRaceTest extends Env {
  static final int ITERS = 50;
  private Path file;
  private ExecutorService pool;
  private String path;

  @BeforeEach
  void counter() throws Exception {
    file = Files.createTempFile("dlock-race-", ".count");
    Files.writeString(file, "0\n");
    pool = Executors.newFixedThreadPool(2);
    path = "/race-" + System.nanoTime();
  }

  @AfterEach
  void cleanup() throws Exception {
    pool.shutdownNow();
    Files.deleteIfExists(file);
    Files.deleteIfExists(Path.of(file + ".log"));
  }

  interface Take { Object take() throws Exception; }
  interface Give { void give(Object held) throws Exception; }
  interface Make { Take make(CuratorFramework c, Give[] give) throws Exception; }

  private void bump() throws Exception {
    long v = Long.parseLong(Files.readString(file).trim());
    Files.writeString(file, (v + 1) + "\n");
    Files.writeString(Path.of(file + ".log"), "curator 0\n", StandardCharsets.UTF_8,
        StandardOpenOption.CREATE, StandardOpenOption.APPEND);
  }

  private void race(String kind, Make make) throws Exception {
    Proc d1 = helper(), d2 = helper();
    d1.cmd("id", BOUND_MS); // connected
    d2.cmd("id", BOUND_MS);
    Take[] tks = new Take[2];
    Give[][] gives = {new Give[1], new Give[1]};
    for (int t = 0; t < 2; t++) tks[t] = make.make(curator(), gives[t]); // connected first
    d1.send("count " + kind + " " + path + " " + ITERS + " " + file);
    d2.send("count " + kind + " " + path + " " + ITERS + " " + file);
    List<Future<Integer>> fs = new ArrayList<>();
    for (int t = 0; t < 2; t++) {
      Take tk = tks[t];
      Give gv = gives[t][0];
      fs.add(pool.submit(() -> {
        int n = 0;
        for (; n < ITERS; n++) {
          Object held = tk.take();
          assertTrue(held != null, kind + ": Curator got nothing in 10 s");
          try {
            bump();
          } finally {
            gv.give(held);
          }
        }
        return n;
      }));
    }
    for (Future<Integer> f : fs) assertEquals(ITERS, f.get(60, TimeUnit.SECONDS));
    assertEquals("ok " + ITERS, d1.line(60_000), kind + ": the first dlock process");
    assertEquals("ok " + ITERS, d2.line(60_000), kind + ": the second dlock process");
    assertEquals(4 * ITERS, Long.parseLong(Files.readString(file).trim()),
        kind + ": updates were lost, so two holders were in at once");
    List<String> log = Files.readAllLines(Path.of(file + ".log"));
    assertEquals(4 * ITERS, log.size(), "one log line per increment");
    int switches = 0;
    for (int i = 1; i < log.size(); i++)
      if (!log.get(i).split(" ")[0].equals(log.get(i - 1).split(" ")[0])) switches++;
    System.out.println("race " + kind + ": " + log.size() + " increments, the holder switched "
        + "between Curator and dlock " + switches + " times");
  }

  private static Take lockTake(InterProcessLock l) {
    return () -> l.acquire(10, TimeUnit.SECONDS) ? l : null;
  }

  @Test
  void mutex() throws Exception {
    race("lock", (c, give) -> {
      InterProcessMutex l = new InterProcessMutex(c, path);
      give[0] = h -> l.release();
      return lockTake(l);
    });
  }

  @Test
  void writeLock() throws Exception {
    race("write", (c, give) -> {
      InterProcessLock l = new InterProcessReadWriteLock(c, path).writeLock();
      give[0] = h -> l.release();
      return lockTake(l);
    });
  }

  @Test
  void semaphoreV2() throws Exception {
    // one lease: dlock's count node says 1, every Curator process passes 1
    Proc d = helper();
    assertEquals("ok set", d.cmd("psem-set " + path + " 1", BOUND_MS));
    race("psem", (c, give) -> {
      InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, path, 1);
      give[0] = h -> s.returnLease((Lease) h);
      return () -> s.acquire(10, TimeUnit.SECONDS);
    });
  }
}
