// Command etcd_worker: one worker of bench/compare's loop over etcd's Go
// client, go.etcd.io/etcd/client/v3/concurrency.Mutex.
//
//	etcd_worker --url etcd://HOST:PORT[,HOST:PORT...] --name NAME --hold-us H
//	    --seconds D [--start-ns T] [--worker I] [--threads N [--distinct]]
//	    --records FILE
//
// The loop and records of every peer (bench/README.md): from the
// CLOCK_MONOTONIC instant T until T + D: acquire, take the time, busy-wait H
// us, take the time, release; one `worker,acquire_ns,release_ns` line per
// pass. CLOCK_MONOTONIC is read once by clock_gettime(2) and carried on by
// Go's own monotonic clock (CLOCK_MONOTONIC on Linux), so the records share
// one timeline with the other peers' processes.
//
// One clientv3 client per process (its gRPC connection); "threads" are
// goroutines, each with its own concurrency.Session (a lease, default TTL
// 60 s, kept alive) and Mutex, because one session's Mutex instances on one
// name share a key and would not exclude each other. The Mutex is made on
// NAME, so its keys are NAME/<lease hex>: dlock's, etcdctl lock's layout.
// A wait is bounded by a context that ends at the end instant.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
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
		fmt.Fprintln(os.Stderr, "etcd_worker: clock_gettime:", e)
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

func loop(cli *clientv3.Client, id int, name string, holdNs, start, end int64,
	out *[]string, mu *sync.Mutex) error {
	s, err := concurrency.NewSession(cli)
	if err != nil {
		return err
	}
	defer s.Close()
	m := concurrency.NewMutex(s, name)
	var recs []string
	sleepUntil(start)
	for len(recs) < maxRecords {
		if now() >= end {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(),
			time.Duration(end-now()))
		err := m.Lock(ctx)
		cancel()
		if err != nil {
			if now() >= end {
				break // the run ended while waiting
			}
			return err
		}
		acq := now()
		rel := acq
		for spin := 0; rel-acq < holdNs && spin < 2e9; spin++ {
			rel = now()
		}
		if err := m.Unlock(context.Background()); err != nil {
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
	url := flag.String("url", "", "etcd://host:port[,host:port...]")
	name := flag.String("name", "", "lock name")
	holdUs := flag.Float64("hold-us", 0, "hold time in us")
	seconds := flag.Float64("seconds", 0, "run length")
	startNs := flag.Int64("start-ns", -1, "CLOCK_MONOTONIC start instant")
	worker := flag.Int("worker", 0, "worker id")
	threads := flag.Int("threads", 1, "goroutines")
	distinct := flag.Bool("distinct", false, "one lock per goroutine")
	records := flag.String("records", "", "CSV output")
	flag.Parse()
	if !strings.HasPrefix(*url, "etcd://") || *name == "" || *records == "" ||
		!(*seconds > 0) || *threads < 1 || *threads > 256 {
		fmt.Fprintln(os.Stderr, "etcd_worker: needs --url etcd://... --name --seconds --records (threads 1..256)")
		os.Exit(2)
	}
	baseTime = time.Now()
	baseMono = clockMonotonic()

	eps := strings.Split(strings.TrimSuffix(strings.TrimPrefix(*url, "etcd://"), "/"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd_worker:", err)
		os.Exit(2)
	}
	defer cli.Close()
	start := *startNs
	if start < 0 {
		start = now()
	}
	end := start + int64(*seconds*1e9)
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
			errs[t] = loop(cli, id, lname, int64(*holdUs*1000), start, end, &out, &mu)
		}(t, id, lname)
	}
	wg.Wait()
	f, err := os.Create(*records)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd_worker:", err)
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
			fmt.Fprintf(os.Stderr, "etcd_worker %d: %v\n", *worker, e)
			code = 1
		}
	}
	os.Exit(code)
}
