// race.go: a mixed race on one etcd lock, for test_etcd's go_race case.
//
//	etcd-go-locker race ENDPOINTS URL HELPER
//
// Two goroutines (each its own client and session, concurrency.Mutex) and
// two dlock processes (HELPER, tests/interop/dlock_interop, on URL: `count
// fenced NAME 50 FILE`, the same layout) each add 1 to a counter file 50
// times under the lock, all at once. Every increment appends "<who>
// <token>" to FILE.log, the token being the holder's key's create revision
// (dlock's fencing token; Go's read back with a Get). The total must be
// exactly 200 and the tokens must grow strictly in the order of the
// increments. How often the holder switched sides is printed, not checked
// (it depends on scheduling). Exit status 0, 1 when a check fails, 2 when
// a step fails. Every wait is bounded (10 s a lock, 60 s a side).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const raceIters = 50

// bumpFile adds 1 to the count in file and appends "who token" to file.log.
func bumpFile(file, who string, token int64) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("the count file holds %q", b)
	}
	if err := os.WriteFile(file, []byte(fmt.Sprintf("%d\n", v+1)), 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(file+".log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %d\n", who, token)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func goRacer(endpoints, name, file string, done chan<- error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: splitEndpoints(endpoints), DialTimeout: 5 * time.Second})
	if err != nil {
		done <- err
		return
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(longTTL))
	if err != nil {
		done <- err
		return
	}
	defer s.Close()
	m := concurrency.NewMutex(s, name)
	for i := 0; i < raceIters; i++ {
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m.Lock(ctx); err != nil {
				return fmt.Errorf("Go Lock: %w", err)
			}
			defer m.Unlock(context.Background())
			r, err := cli.Get(ctx, m.Key())
			if err != nil || len(r.Kvs) != 1 {
				return fmt.Errorf("Go: cannot read its key: %v", err)
			}
			return bumpFile(file, "go", r.Kvs[0].CreateRevision)
		}()
		if err != nil {
			done <- err
			return
		}
	}
	done <- nil
}

func splitEndpoints(endpoints string) []string {
	var eps []string
	for _, e := range strings.Split(endpoints, ",") {
		eps = append(eps, strings.TrimPrefix(e, "http://"))
	}
	return eps
}

func race(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: etcd-go-locker race ENDPOINTS URL HELPER")
		return 2
	}
	endpoints, url, helperPath := args[0], args[1], args[2]
	f, err := os.CreateTemp("", "dlock-race-*.count")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	file := f.Name()
	f.WriteString("0\n")
	f.Close()
	defer os.Remove(file)
	defer os.Remove(file + ".log")
	rc := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				fl, ok := r.(failure)
				if !ok {
					panic(r)
				}
				fmt.Fprintln(os.Stderr, "race: "+fl.msg)
				rc = 2
			}
		}()
		name := "race-mutex"
		d1 := startHelper(helperPath, url, longTTL*1000)
		d2 := startHelper(helperPath, url, longTTL*1000)
		defer d1.close()
		defer d2.close()
		done := make(chan error, 2)
		d1.send(fmt.Sprintf("count fenced %s %d %s", name, raceIters, file))
		d2.send(fmt.Sprintf("count fenced %s %d %s", name, raceIters, file))
		go goRacer(endpoints, name, file, done)
		go goRacer(endpoints, name, file, done)
		for i := 0; i < 2; i++ {
			select {
			case err := <-done:
				must(err, "a Go racer")
			case <-time.After(60 * time.Second):
				panic(failure{"a Go racer did not finish within 60 s"})
			}
		}
		for _, d := range []*helper{d1, d2} {
			a := d.answer("count")
			check(a == fmt.Sprintf("ok %d", raceIters), "a dlock racer: %s", a)
		}
		b, err := os.ReadFile(file)
		must(err, "read the count")
		total := strings.TrimSpace(string(b))
		lb, err := os.ReadFile(file + ".log")
		must(err, "read the log")
		lines := strings.Split(strings.TrimSpace(string(lb)), "\n")
		var last int64
		switches := 0
		for i, l := range lines {
			var who string
			var tok int64
			if _, err := fmt.Sscanf(l, "%s %d", &who, &tok); err != nil {
				panic(failure{fmt.Sprintf("log line %d: %q", i+1, l)})
			}
			if tok <= last {
				fmt.Printf("race: token %d (increment %d, %s) after %d: not increasing\n", tok, i+1, who, last)
				rc = 1
			}
			if i > 0 && strings.Fields(lines[i-1])[0] != who {
				switches++
			}
			last = tok
		}
		if total != strconv.Itoa(4*raceIters) || len(lines) != 4*raceIters {
			fmt.Printf("race: the count is %s with %d log lines, not %d: updates were lost, so two holders were in at once\n",
				total, len(lines), 4*raceIters)
			rc = 1
		}
		fmt.Printf("race: %s increments, tokens increasing: %v, the holder switched between Go and dlock %d times\n",
			total, rc == 0, switches)
	}()
	return rc
}
