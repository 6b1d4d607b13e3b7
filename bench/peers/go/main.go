// Command redsync_worker: one worker of bench/compare's loop over go-redsync.
//
//	redsync_worker --url URL --name NAME --hold-us H --seconds D
//	    [--start-ns T] [--worker I] [--threads N [--distinct]] --records FILE
//
// The loop and records of every peer (bench/README.md): from the
// CLOCK_MONOTONIC instant T until T + D: acquire, take the time, busy-wait H
// us, take the time, release; one `worker,acquire_ns,release_ns` line per
// pass. CLOCK_MONOTONIC is read once by clock_gettime(2) and carried on by
// Go's own monotonic clock (which is CLOCK_MONOTONIC on Linux), so the
// records share one timeline with the other peers' processes. "Threads"
// are goroutines sharing one go-redis client (its pool), each with its own
// redsync.Mutex.
//
// go-redsync v4 with its defaults over the one server (a pool of one):
// expiry 8 s, 32 tries, retry delay uniform in [50, 250) ms, drift factor
// 0.01. An acquire that spends its tries (ErrFailed) is retried until the
// end instant; the context ends a wait at the end instant.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

const maxRecords = 2 * 1024 * 1024

var (
	baseMono int64
	baseTime time.Time
)

func clockMonotonic() int64 {
	var ts syscall.Timespec
	_, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, /* CLOCK_MONOTONIC */
		uintptr(unsafe.Pointer(&ts)), 0)
	if e != 0 {
		fmt.Fprintln(os.Stderr, "redsync_worker: clock_gettime:", e)
		os.Exit(2)
	}
	return ts.Nano()
}

func now() int64 { return baseMono + int64(time.Since(baseTime)) }

func sleepUntil(t int64) {
	if d := time.Duration(t-now()) - 2*time.Millisecond; d > 0 {
		time.Sleep(d)
	}
	for i := 0; i < 2e9 && now() < t; i++ {
	}
}

func loop(rs *redsync.Redsync, id int, name string, holdNs, start, end int64,
	out *[]string, mu *sync.Mutex) error {
	m := rs.NewMutex(name)
	var recs []string
	sleepUntil(start)
	for len(recs) < maxRecords {
		if now() >= end {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(),
			time.Duration(end-now()))
		err := m.LockContext(ctx)
		cancel()
		if err != nil {
			if now() >= end {
				break // the run ended while waiting
			}
			var taken *redsync.ErrTaken
			if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
				continue // its tries are spent: try again
			}
			return err
		}
		acq := now()
		rel := acq
		for spin := 0; rel-acq < holdNs && spin < 2e9; spin++ {
			rel = now()
		}
		if _, err := m.Unlock(); err != nil {
			return err
		}
		recs = append(recs, fmt.Sprintf("%d,%d,%d", id, acq, rel))
	}
	mu.Lock()
	*out = append(*out, recs...)
	mu.Unlock()
	return nil
}

func main() {
	url := flag.String("url", "", "redis://host:port")
	name := flag.String("name", "", "lock name")
	holdUs := flag.Float64("hold-us", 0, "hold time in us")
	seconds := flag.Float64("seconds", 0, "run length")
	startNs := flag.Int64("start-ns", -1, "CLOCK_MONOTONIC start instant")
	worker := flag.Int("worker", 0, "worker id")
	threads := flag.Int("threads", 1, "goroutines")
	distinct := flag.Bool("distinct", false, "one lock per goroutine")
	records := flag.String("records", "", "CSV output")
	flag.Parse()
	if *url == "" || *name == "" || *records == "" || !(*seconds > 0) ||
		*threads < 1 || *threads > 256 {
		fmt.Fprintln(os.Stderr, "redsync_worker: needs --url --name --seconds --records (threads 1..256)")
		os.Exit(2)
	}
	baseTime = time.Now()
	baseMono = clockMonotonic()

	opt, err := goredislib.ParseURL(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redsync_worker:", err)
		os.Exit(2)
	}
	client := goredislib.NewClient(opt)
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "redsync_worker:", err)
		os.Exit(2)
	}
	rs := redsync.New(goredis.NewPool(client))
	start := *startNs
	if start < 0 {
		start = now()
	}
	end := start + int64(*seconds*1e9)
	if late := now() - start; late > 0 {
		fmt.Fprintf(os.Stderr, "redsync_worker %d: reached the start instant %.1f ms late\n",
			*worker, float64(late)/1e6)
	}
	var out []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, *threads)
	for t := 0; t < *threads; t++ {
		id := *worker
		if *threads > 1 {
			id = *worker**threads + t
		}
		lname := *name
		if *distinct {
			lname = fmt.Sprintf("%s:%d", *name, id)
		}
		wg.Add(1)
		go func(t, id int, lname string) {
			defer wg.Done()
			errs[t] = loop(rs, id, lname, int64(*holdUs*1000), start, end, &out, &mu)
		}(t, id, lname)
	}
	wg.Wait()
	f, err := os.Create(*records)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redsync_worker:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(f)
	w.WriteString("worker,acquire_ns,release_ns\n")
	for _, r := range out {
		w.WriteString(r)
		w.WriteByte('\n')
	}
	w.Flush()
	f.Close()
	code := 0
	for _, e := range errs {
		if e != nil {
			fmt.Fprintf(os.Stderr, "redsync_worker %d: %v\n", *worker, e)
			code = 1
		}
	}
	os.Exit(code)
}
