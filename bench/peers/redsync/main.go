// Command redsync-latency: go-redsync (v4) acquire+release latency over the
// given Redis masters, one pair at a time, uncontended, for beside
// bench/redlock-bench (bench/redlock.sh runs it when Go is installed).
//
//	go run . ITERS URL1 ... URLn
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

func main() {
	iters, err := strconv.Atoi(os.Args[1])
	if err != nil || len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: redsync-latency ITERS URL1 ... URLn")
		os.Exit(64)
	}
	var pools []redis.Pool
	for _, u := range os.Args[2:] {
		opt, err := goredislib.ParseURL(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(64)
		}
		c := goredislib.NewClient(opt)
		if err := c.Ping(context.Background()).Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(69)
		}
		pools = append(pools, goredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	warm := iters / 10
	ns := make([]int64, 0, iters)
	for i := 0; i < warm+iters; i++ {
		m := rs.NewMutex("bench-redsync", redsync.WithExpiry(10*time.Second),
			redsync.WithTries(1))
		t0 := time.Now()
		if err := m.Lock(); err != nil {
			fmt.Fprintln(os.Stderr, "lock:", err)
			os.Exit(1)
		}
		if _, err := m.Unlock(); err != nil {
			fmt.Fprintln(os.Stderr, "unlock:", err)
			os.Exit(1)
		}
		if i >= warm {
			ns = append(ns, time.Since(t0).Nanoseconds())
		}
	}
	sort.Slice(ns, func(a, b int) bool { return ns[a] < ns[b] })
	pct := func(p float64) float64 { return float64(ns[int(p*float64(len(ns)-1))]) / 1000 }
	var sum int64
	for _, v := range ns {
		sum += v
	}
	fmt.Printf("go-redsync v4 over %d: median %.1f us, p90 %.1f, p99 %.1f, mean %.1f (%d pairs)\n",
		len(pools), pct(0.5), pct(0.9), pct(0.99), float64(sum)/float64(len(ns))/1000, iters)
}
