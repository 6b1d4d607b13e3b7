/*
 * fnet.h - network faults for the fault suite: a private network namespace
 * with packet filters, and a delaying relay.
 *
 * fnet_enter() moves the calling process into a network namespace of its
 * own (unshare(CLONE_NEWNET)) with only a loopback interface, brought up.
 * Everything the test starts afterwards (redis-servers, workers) lives in
 * it, and every address used is in 127.0.0.0/8 of that namespace's lo.
 * iptables rules added there (fnet_iptables) vanish with the namespace, so
 * a test never touches the machine's own filters. A lock server bound to
 * 127.0.0.1 and 127.0.0.2 can then be cut off from the clients that use
 * 127.0.0.2 while the test still reaches it on 127.0.0.1.
 *
 * The relay (fnet_relay_*) forwards TCP between 127.0.0.1:<its port> and a
 * target port, holding every chunk for a fixed delay in each direction (the
 * kernel here has no netem qdisc). Packet loss comes from iptables'
 * statistic match on the relay's port; when iptables is not usable, the
 * relay can imitate loss itself by holding a chunk for an extra
 * retransmission timeout with the given probability (what a lost segment
 * costs a TCP connection).
 *
 * Threads: fnet_enter() from the main thread before any other thread or
 * child exists; the relay runs one thread of its own.
 */
#ifndef DLOCK_FAULT_FNET_H
#define DLOCK_FAULT_FNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Enters a new network namespace with lo up. 0, or -1 with the reason in
 * why (namespaces not permitted, ...). */
int fnet_enter(char *why, size_t n);
/* True when an iptables binary was found and works in this namespace. */
bool fnet_have_iptables(char *why, size_t n);
/* Runs `iptables -w 5 ARGS` (args split at spaces). 0 or -1 (printed). */
int fnet_iptables(const char *args);
/* The same, keeping up to n-1 bytes of its stdout in out. */
int fnet_iptables_out(const char *args, char *out, size_t n);

typedef struct fnet_relay fnet_relay_t;
/* A relay on a free 127.0.0.1 port to 127.0.0.1:target_port, delaying
 * each direction by delay_ms; loss_pct > 0 imitates loss (extra rto_ms
 * hold for that share of chunks). NULL on failure. */
fnet_relay_t *fnet_relay_start(int target_port, int64_t delay_ms,
                               double loss_pct, int64_t rto_ms);
int fnet_relay_port(const fnet_relay_t *r);
/* Chunks forwarded and chunks held back as "lost" so far. */
void fnet_relay_stats(fnet_relay_t *r, int64_t *chunks, int64_t *lost);
void fnet_relay_stop(fnet_relay_t *r);

#endif /* DLOCK_FAULT_FNET_H */
