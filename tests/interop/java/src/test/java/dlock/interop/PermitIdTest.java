package dlock.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.api.RPermitExpirableSemaphore;

/**
 * RPermitExpirableSemaphore permit ids across the two clients: the member
 * Redisson stores for a permit (the real jar decides: 16 raw bytes in
 * 3.52), the one dlock stores, and a permit taken by one client released,
 * renewed and shown by the other. The id passes between processes as the
 * 32 hex digits both APIs give.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class PermitIdTest extends Env {
  private String timeoutKey() { return "{" + name + "}:timeout"; }

  /** The members of {name}:timeout, byte for byte (one char per byte). */
  @SuppressWarnings("unchecked")
  private List<Object> members() throws Exception {
    try (Resp raw = new Resp(URL, true)) {
      return (List<Object>) raw.call("ZRANGE", timeoutKey(), "0", "-1");
    }
  }

  private static String bytesOf(String hex) {
    return new String(HexFormat.of().parseHex(hex), StandardCharsets.ISO_8859_1);
  }

  @Test
  void redissonStoresSixteenRawBytes() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    assertTrue(s.trySetPermits(1));
    String id = s.tryAcquire(0, 30, TimeUnit.SECONDS);
    assertNotNull(id);
    assertEquals(32, id.length(), "Redisson's permit id is 32 hex digits: " + id);
    assertEquals(List.of(bytesOf(id)), members(), "Redisson's member is the 16 bytes the id spells");
    s.release(id);
  }

  @Test
  void dlockStoresWhatRedissonStoresAndRedissonReleasesIt() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    Proc c = helper();
    assertEquals("ok set", c.cmd("psem-set " + name + " 2", 10_000));
    String a = c.cmd("psem-acquire " + name + " 30000", 10_000);
    assertTrue(a.startsWith("ok "), a);
    String id = a.substring(3);
    assertEquals(List.of(bytesOf(id)), members(), "dlock's member is the 16 bytes its id spells");
    // Redisson reads, renews and releases dlock's permit by its id.
    long left = s.getLeaseTime(id);
    assertTrue(left > 20_000 && left <= 30_000, "Redisson's getLeaseTime of dlock's permit: " + left);
    assertTrue(s.updateLeaseTime(id, 60, TimeUnit.SECONDS), "Redisson renews dlock's permit");
    s.release(id); // throws when the id is unknown
    assertEquals(2, s.availablePermits());
    assertEquals(List.of(), members());
  }

  @Test
  void dlockReleasesRedissonsPermit() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    assertTrue(s.trySetPermits(2));
    String leased = s.tryAcquire(0, 30, TimeUnit.SECONDS);
    String unleased = s.tryAcquire();
    assertNotNull(leased);
    assertNotNull(unleased);
    Proc c = helper();
    assertEquals("ok", c.cmd("psem-release " + name + " " + leased, 10_000));
    assertEquals("ok", c.cmd("psem-release " + name + " " + unleased, 10_000));
    assertTrue(c.cmd("psem-release " + name + " " + unleased, 10_000).startsWith("err DLOCK_ENOTOWNER"),
        "a second release of the same id is refused");
    assertEquals(2, s.availablePermits());
  }

  @Test
  void statusShowsRedissonsPermitsByTheirIds() throws Exception {
    RPermitExpirableSemaphore s = redisson().getPermitExpirableSemaphore(name);
    assertTrue(s.trySetPermits(3));
    String leased = s.tryAcquire(0, 30, TimeUnit.SECONDS);
    String unleased = s.tryAcquire();
    Result r = dlockRun(10_000, "-N", "3", "--status", name);
    assertEquals(0, r.status(), r.out());
    assertTrue(r.out().contains("permits: 1 free, 2 in use"), r.out());
    assertTrue(r.out().contains("holder:  permit " + unleased + " (no lease)"), r.out());
    assertTrue(r.out().matches("(?s).*holder:  permit " + leased + " \\(\\d+ ms of lease left\\).*"), r.out());
    Result j = dlockRun(10_000, "-N", "3", "--status", "--json", name);
    // a Redisson permit has no holder identity: info and who are null
    assertTrue(j.out().contains("{\"id\":\"" + unleased
        + "\",\"lease_ms\":-1,\"info\":null,\"who\":null}"), j.out());
    s.release(leased);
    s.release(unleased);
  }
}
