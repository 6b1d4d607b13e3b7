/*
 * certs.h - test certificates made by the `openssl` command, once per
 * process, in a mkdtemp directory removed at exit.
 *
 * What is made (EC P-256 keys, valid two days):
 *   ca.crt/.key        a CA ("dlock-test-ca")
 *   otherca.crt/.key   an unrelated CA
 *   server.crt/.key    signed by ca, for localhost and 127.0.0.1 (SAN),
 *                      usable for both server and client auth
 *   other.crt/.key     signed by ca, for other.example only
 *   client.crt/.key    signed by ca, client auth
 *   otherclient.crt/.key signed by otherca, client auth
 *
 * Threads: call th_certs_dir first from the main thread; th_cert's
 * buffers are per thread.
 */
#ifndef DLOCK_TEST_CERTS_H
#define DLOCK_TEST_CERTS_H

/* The directory, making the certificates on the first call; NULL (after
 * printing why) if openssl failed. */
const char *th_certs_dir(void);
/* "<dir>/<file>" in one of 8 rotating per-thread buffers; makes the
 * certificates if needed (the path is then under "/nonexistent"). */
const char *th_cert(const char *file);

#endif
