// conform.go: layout conformance against clientv3's concurrency.Mutex, for
// test_etcd's go_conformance case (docs/ETCD.md, "Conformance with
// clientv3").
//
//	etcd-go-locker conform ENDPOINTS_A ENDPOINTS_B URL_B HELPER ETCD_MD
//
// One scripted sequence of steps per anchor runs twice, on twin fresh etcd
// servers: on A driven by the anchor (this Go client's concurrency.Mutex of
// client/v3; `etcdctl lock`, $DLOCK_ETCDCTL or etcdctl on PATH), on B
// driven by dlock (HELPER, tests/interop/dlock_interop, on URL_B, one
// process per contender, as Go has one session per contender). After each
// twin's side of a step the whole keyspace of that twin is dumped with
// clientv3 and normalised: a lease id (also where it is a key's last path
// segment, in hex) becomes L1, L2... in the order its first key was
// created; revisions become ranks (create: the key's place by create
// revision among the keys present; mod: "create" when the key was not
// written since, else its rank among the mod revisions); every lease the
// server has is listed with its label (or "-" for a lease no key has used
// yet), its granted TTL and how many keys it carries. The two dumps must
// be identical, field by field, except for the fields docs/ETCD.md's table
// "Deliberate differences" lists for the kind (read from ETCD_MD).
// Prints every step with both dumps; exit status 0 when they agree, 1 with
// the differences, 2 on a usage error or a failed step.
//
// Waits are conditions (a key count, an answer), each bounded; nothing
// waits on a clock, except that the expiry of a lease is etcd's own.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const (
	longTTL  = 60 // seconds: the sessions that end only when told
	shortTTL = 2  // seconds: the session of a holder that crashes
	bound    = 20 * time.Second
)

type failure struct{ msg string }

func must(err error, what string) {
	if err != nil {
		panic(failure{what + ": " + err.Error()})
	}
}

func check(cond bool, format string, a ...any) {
	if !cond {
		panic(failure{fmt.Sprintf(format, a...)})
	}
}

// ------------------------------------------------------------------ twins

// twin is one fresh etcd server and what its dumps have labelled so far.
type twin struct {
	side   string
	cli    *clientv3.Client
	leases map[int64]string
	owners map[string]string
}

func newTwin(side, endpoints string) *twin {
	cli, err := clientv3.New(clientv3.Config{Endpoints: splitEndpoints(endpoints), DialTimeout: 5 * time.Second})
	must(err, side+": connect")
	return &twin{side: side, cli: cli, leases: map[int64]string{}, owners: map[string]string{}}
}

func ctxb() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), bound)
}

// keys is the number of keys on the server.
func (t *twin) keys() int64 {
	ctx, cancel := ctxb()
	defer cancel()
	r, err := t.cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	must(err, t.side+": count keys")
	return r.Count
}

// awaitKeys waits (bounded) until the server has n keys.
func (t *twin) awaitKeys(n int64) {
	deadline := time.Now().Add(bound)
	for t.keys() != n {
		check(time.Now().Before(deadline), "%s: still not %d keys after %v", t.side, n, bound)
		time.Sleep(20 * time.Millisecond)
	}
}

// dump is the normalised state: one line per key (by create revision),
// then one per lease. A key line is "key <name> <field>=<value>...".
func (t *twin) dump() []string {
	ctx, cancel := ctxb()
	defer cancel()
	r, err := t.cli.Get(ctx, "\x00", clientv3.WithFromKey(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	must(err, t.side+": dump keys")
	for _, kv := range r.Kvs {
		if kv.Lease != 0 {
			if _, ok := t.leases[kv.Lease]; !ok {
				t.leases[kv.Lease] = fmt.Sprintf("L%d", len(t.leases)+1)
			}
		}
	}
	mods := []int64{}
	for _, kv := range r.Kvs {
		mods = append(mods, kv.ModRevision)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i] < mods[j] })
	var out []string
	for i, kv := range r.Kvs {
		name := string(kv.Key)
		segs := strings.Split(name, "/")
		last := segs[len(segs)-1]
		if id, err := strconv.ParseInt(last, 16, 64); err == nil {
			if l, ok := t.leases[id]; ok {
				segs[len(segs)-1] = "<" + l + ">"
			}
		}
		name = strings.Join(segs, "/")
		value := strconv.Quote(string(kv.Value))
		if len(kv.Value) > 0 {
			// dlock's owner string, <client-id>:<thread>: labelled
			if _, ok := t.owners[string(kv.Value)]; !ok {
				t.owners[string(kv.Value)] = fmt.Sprintf("owner%d", len(t.owners)+1)
			}
			value = t.owners[string(kv.Value)]
		}
		mod := "create"
		if kv.ModRevision != kv.CreateRevision {
			mod = "#" + strconv.Itoa(sort.Search(len(mods), func(j int) bool {
				return mods[j] >= kv.ModRevision
			})+1)
		}
		lease := "none"
		if kv.Lease != 0 {
			lease = t.leases[kv.Lease]
		}
		out = append(out, fmt.Sprintf("key %s value=%s create=#%d mod=%s version=%d lease=%s",
			name, value, i+1, mod, kv.Version, lease))
	}
	ls, err := t.cli.Leases(ctx)
	must(err, t.side+": list leases")
	var lines []string
	for _, l := range ls.Leases {
		ttl, err := t.cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		must(err, t.side+": lease time to live")
		if ttl.TTL < 0 {
			continue // expired between the list and the look-up
		}
		label := t.leases[int64(l.ID)]
		if label == "" {
			label = "-"
		}
		lines = append(lines, fmt.Sprintf("lease %s granted=%ds keys=%d", label, ttl.GrantedTTL, len(ttl.Keys)))
	}
	sort.Strings(lines)
	return append(out, lines...)
}

// ----------------------------------------------------------------- dlock

// helper is one dlock_interop process: one dlock client, one contender.
type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out chan string
}

func startHelper(path, url string, sessionMs int) *helper {
	c := exec.Command(path, url)
	c.Env = append(os.Environ(), fmt.Sprintf("DLOCK_INTEROP_SESSION_MS=%d", sessionMs))
	c.Stderr = os.Stderr
	in, err := c.StdinPipe()
	must(err, "helper stdin")
	outp, err := c.StdoutPipe()
	must(err, "helper stdout")
	must(c.Start(), "start "+path)
	h := &helper{cmd: c, in: in, out: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(outp)
		for s.Scan() {
			h.out <- s.Text()
		}
		close(h.out)
	}()
	h.call("id") // its session (lease) is granted once this answers
	return h
}

func (h *helper) send(line string) {
	_, err := io.WriteString(h.in, line+"\n")
	must(err, "write to dlock_interop")
}

func (h *helper) answer(what string) string {
	select {
	case a, ok := <-h.out:
		check(ok, "dlock_interop exited before answering %q", what)
		return a
	case <-time.After(bound):
		panic(failure{fmt.Sprintf("dlock_interop: no answer to %q within %v", what, bound)})
	}
}

func (h *helper) call(line string) string {
	h.send(line)
	return h.answer(line)
}

func (h *helper) ok(line string) {
	a := h.call(line)
	check(strings.HasPrefix(a, "ok"), "dlock_interop `%s`: %s", line, a)
}

func (h *helper) crash() {
	must(h.cmd.Process.Kill(), "kill dlock_interop")
	h.cmd.Wait()
}

func (h *helper) close() {
	h.in.Close()
	h.cmd.Wait()
}

// -------------------------------------------------------------------- Go

// goer is one Go contender: its own client and session (lease).
type goer struct {
	cli  *clientv3.Client
	s    *concurrency.Session
	m    *concurrency.Mutex
	done chan error
}

func newGoer(t *twin, endpoints, name string, ttl int) *goer {
	cli, err := clientv3.New(clientv3.Config{Endpoints: splitEndpoints(endpoints), DialTimeout: 5 * time.Second})
	must(err, "Go client")
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	must(err, "Go session")
	return &goer{cli: cli, s: s, m: concurrency.NewMutex(s, name)}
}

func (g *goer) lock() {
	ctx, cancel := ctxb()
	defer cancel()
	must(g.m.Lock(ctx), "Go Lock")
}

func (g *goer) lockAsync() {
	g.done = make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
		defer cancel()
		g.done <- g.m.Lock(ctx)
	}()
}

func (g *goer) awaitLock() {
	select {
	case err := <-g.done:
		must(err, "Go Lock (waited)")
	case <-time.After(bound):
		panic(failure{fmt.Sprintf("Go Lock: not granted within %v", bound)})
	}
}

func (g *goer) unlock() {
	ctx, cancel := ctxb()
	defer cancel()
	must(g.m.Unlock(ctx), "Go Unlock")
}

// -------------------------------------------------------------- the diff

// extensions: the fields docs/ETCD.md's "Deliberate differences" table
// lists for kind (rows "| kind | `field` | why |").
func extensions(doc, kind string) map[string]bool {
	b, err := os.ReadFile(doc)
	must(err, "read "+doc)
	ext := map[string]bool{}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") {
			in = strings.Contains(l, "Deliberate differences")
			continue
		}
		if !in || !strings.HasPrefix(l, "|") {
			continue
		}
		cols := strings.Split(l, "|")
		if len(cols) < 4 {
			continue
		}
		if strings.TrimSpace(cols[1]) == kind || strings.TrimSpace(cols[1]) == "every kind" {
			ext[strings.Trim(strings.TrimSpace(cols[2]), "`")] = true
		}
	}
	return ext
}

// fields of a dump line: its head ("key NAME" / "lease LABEL") and the
// field=value pairs.
func fields(line string) (string, map[string]string) {
	parts := strings.Fields(line)
	m := map[string]string{}
	for _, p := range parts[2:] {
		if i := strings.IndexByte(p, '='); i > 0 {
			m[p[:i]] = p[i+1:]
		}
	}
	return parts[0] + " " + parts[1], m
}

// diff compares the dumps line by line (by head), field by field; a field
// listed in ext may differ.
func diff(anchor string, a, b []string, ext map[string]bool) []string {
	var d []string
	if len(a) != len(b) {
		d = append(d, fmt.Sprintf("%d lines against %d", len(a), len(b)))
	}
	for i := 0; i < len(a) || i < len(b); i++ {
		if i >= len(a) {
			d = append(d, "dlock only: "+b[i])
			continue
		}
		if i >= len(b) {
			d = append(d, anchor+" only: "+a[i])
			continue
		}
		ha, fa := fields(a[i])
		hb, fb := fields(b[i])
		if ha != hb || len(fa) != len(fb) {
			d = append(d, anchor+": "+a[i], "dlock: "+b[i])
			continue
		}
		for k, v := range fa {
			if fb[k] != v && !ext[k] {
				d = append(d, fmt.Sprintf("%s: %s=%s (%s) against %s=%s (dlock)", ha, k, v, anchor, k, fb[k]))
			}
		}
	}
	return d
}

// script runs steps on both twins and collects the differences.
type script struct {
	kind   string
	anchor string // who drives twin a: "Go", "etcdctl"
	a, b   *twin
	ext    map[string]bool
	nsteps int
	diffs  []string
}

func (s *script) step(what string, goSide, dlockSide func()) {
	s.nsteps++
	goSide()
	da := s.a.dump()
	dlockSide()
	db := s.b.dump()
	fmt.Printf("%s step %d: %s\n", s.kind, s.nsteps, what)
	for _, l := range da {
		fmt.Println("  " + s.anchor + ": " + l)
	}
	for _, l := range db {
		fmt.Println("  dlock: " + l)
	}
	for _, d := range diff(s.anchor, da, db, s.ext) {
		s.diffs = append(s.diffs, fmt.Sprintf("step %d (%s): %s", s.nsteps, what, d))
	}
}

// ----------------------------------------------------------------- kinds

// mutex: concurrency.Mutex against dlock's DLOCK_REENTRANT on etcd.
func mutex(s *script, epA, urlB, helperPath string) {
	n := "conf-mutex"
	var gA, gB, gC *goer
	var dA, dB, dC *helper
	s.step("A locks", func() {
		gA = newGoer(s.a, epA, n, longTTL)
		gA.lock()
	}, func() {
		dA = startHelper(helperPath, urlB, longTTL*1000)
		dA.ok("lock " + n + " 0")
	})
	s.step("B's TryLock fails (its key is deleted again)", func() {
		gB = newGoer(s.a, epA, n, longTTL)
		ctx, cancel := ctxb()
		defer cancel()
		err := gB.m.TryLock(ctx)
		check(errors.Is(err, concurrency.ErrLocked), "Go TryLock: %v", err)
	}, func() {
		dB = startHelper(helperPath, urlB, longTTL*1000)
		a := dB.call("lock " + n + " 0")
		check(strings.HasPrefix(a, "err DLOCK_EBUSY"), "dlock try: %s", a)
	})
	s.step("B waits (its key queues behind A's)", func() {
		gB.lockAsync()
		s.a.awaitKeys(2)
	}, func() {
		dB.send("lock " + n + " 30000")
		s.b.awaitKeys(2)
	})
	s.step("A unlocks: B gets the lock", func() {
		gA.unlock()
		gB.awaitLock()
	}, func() {
		dA.ok("unlock " + n)
		a := dB.answer("lock (waited)")
		check(strings.HasPrefix(a, "ok"), "dlock wait: %s", a)
	})
	s.step("C (a 2 s session) waits behind B", func() {
		gC = newGoer(s.a, epA, n, shortTTL)
		gC.lockAsync()
		s.a.awaitKeys(2)
	}, func() {
		dC = startHelper(helperPath, urlB, shortTTL*1000)
		dC.send("lock " + n + " 30000")
		s.b.awaitKeys(2)
	})
	s.step("B unlocks: C gets the lock", func() {
		gB.unlock()
		gC.awaitLock()
	}, func() {
		dB.ok("unlock " + n)
		a := dC.answer("lock (waited)")
		check(strings.HasPrefix(a, "ok"), "dlock wait: %s", a)
	})
	s.step("A waits again (a new key on its same lease)", func() {
		gA.lockAsync()
		s.a.awaitKeys(2)
	}, func() {
		dA.send("lock " + n + " 30000")
		s.b.awaitKeys(2)
	})
	s.step("C crashes holding it: its lease runs out, A gets the lock", func() {
		gC.cli.Close() // no revoke: the keep-alives stop
		gA.awaitLock()
	}, func() {
		dC.crash()
		a := dA.answer("lock (waited)")
		check(strings.HasPrefix(a, "ok"), "dlock wait: %s", a)
	})
	s.step("A unlocks (free)", func() { gA.unlock() }, func() { dA.ok("unlock " + n) })
	s.step("B's session closes (its lease is revoked)", func() {
		gB.s.Close()
		gB.cli.Close()
	}, func() { dB.close() })
	gA.s.Close()
	gA.cli.Close()
	dA.close()
}

// ctl is one `etcdctl lock NAME` process (it holds until SIGINT).
type ctl struct {
	cmd *exec.Cmd
	out chan string
}

func startCtl(endpoints, name string, ttl int) *ctl {
	path := os.Getenv("DLOCK_ETCDCTL")
	if path == "" {
		path = "etcdctl"
	}
	c := exec.Command(path, "--endpoints="+strings.Join(splitEndpoints(endpoints), ","),
		"lock", fmt.Sprintf("--ttl=%d", ttl), name)
	c.Env = append(os.Environ(), "ETCDCTL_API=3")
	c.Stderr = os.Stderr
	outp, err := c.StdoutPipe()
	must(err, "etcdctl stdout")
	must(c.Start(), "start "+path)
	e := &ctl{cmd: c, out: make(chan string, 4)}
	go func() {
		s := bufio.NewScanner(outp)
		for s.Scan() {
			e.out <- s.Text()
		}
		close(e.out)
	}()
	return e
}

// held waits (bounded) for the key etcdctl prints once it holds the lock.
func (e *ctl) held(name string) {
	select {
	case l, ok := <-e.out:
		check(ok && strings.HasPrefix(l, name+"/"), "etcdctl lock printed %q", l)
	case <-time.After(bound):
		panic(failure{fmt.Sprintf("etcdctl lock: not held within %v", bound)})
	}
}

// interrupt sends SIGINT (etcdctl's way to let go) and waits for the exit.
func (e *ctl) interrupt() {
	must(e.cmd.Process.Signal(os.Interrupt), "signal etcdctl")
	done := make(chan error, 1)
	go func() { done <- e.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(bound):
		e.cmd.Process.Kill()
		panic(failure{fmt.Sprintf("etcdctl lock: still running %v after SIGINT", bound)})
	}
}

// etcdctlLock: `etcdctl lock NAME` (client 3.4's concurrency.Mutex, a
// session of --ttl 10 s) against dlock's DLOCK_REENTRANT with a 10 s
// session.
func etcdctlLock(s *script, epA, urlB, helperPath string) {
	n := "conf-etcdctl"
	const ttl = 10
	var cA, cB *ctl
	var dA, dB *helper
	s.step("A locks (etcdctl lock NAME)", func() {
		cA = startCtl(epA, n, ttl)
		cA.held(n)
	}, func() {
		dA = startHelper(helperPath, urlB, ttl*1000)
		dA.ok("lock " + n + " 0")
	})
	s.step("B waits", func() {
		cB = startCtl(epA, n, ttl)
		s.a.awaitKeys(2)
	}, func() {
		dB = startHelper(helperPath, urlB, ttl*1000)
		dB.send("lock " + n + " 30000")
		s.b.awaitKeys(2)
	})
	// etcdctl 3.4 on SIGINT unlocks and exits without revoking its
	// session's lease, which runs out --ttl later; a freed dlock client
	// revokes its lease, so the dlock side releases and then dies (SIGKILL)
	// to leave the same state
	s.step("A is interrupted (it unlocks and exits, its lease left to run out): B gets it", func() {
		cA.interrupt()
		cB.held(n)
	}, func() {
		dA.ok("unlock " + n)
		dA.crash()
		a := dB.answer("lock (waited)")
		check(strings.HasPrefix(a, "ok"), "dlock wait: %s", a)
	})
	s.step("B is interrupted the same way: free", func() { cB.interrupt() }, func() {
		dB.ok("unlock " + n)
		dB.crash()
	})
}

func conform(args []string) int {
	if len(args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: etcd-go-locker conform ENDPOINTS_A ENDPOINTS_B URL_B HELPER ETCD_MD")
		return 2
	}
	epA, epB, urlB, helperPath, doc := args[0], args[1], args[2], args[3], args[4]
	rc := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				f, ok := r.(failure)
				if !ok {
					panic(r)
				}
				fmt.Fprintln(os.Stderr, "conform: "+f.msg)
				rc = 2
			}
		}()
		kinds := []struct {
			kind, anchor string
			run          func(*script, string, string, string)
		}{{"concurrency.Mutex", "Go", mutex}, {"etcdctl lock", "etcdctl", etcdctlLock}}
		a, b := newTwin("Go", epA), newTwin("dlock", epB)
		for _, k := range kinds {
			// each kind starts from the state the last one left: empty
			// keyspaces, leases labelled afresh
			a.leases, a.owners = map[int64]string{}, map[string]string{}
			b.leases, b.owners = map[int64]string{}, map[string]string{}
			s := &script{kind: k.kind, anchor: k.anchor, a: a, b: b, ext: extensions(doc, k.kind)}
			k.run(s, epA, urlB, helperPath)
			if len(s.diffs) > 0 {
				fmt.Printf("%s: the states differ where docs/ETCD.md lists no deliberate difference:\n", k.kind)
				for _, d := range s.diffs {
					fmt.Println("  " + d)
				}
				rc = 1
				continue
			}
			fmt.Printf("%s: %d steps, identical but for %v\n", k.kind, s.nsteps, keysOf(s.ext))
		}
	}()
	return rc
}

func keysOf(m map[string]bool) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
