// etcd-transport/main.go: acquire+release latency and client CPU per pair of
// go.etcd.io/etcd/client/v3/concurrency.Mutex over gRPC, for the comparison
// with dlock on the gRPC gateway (bench/etcd-transport.c runs both on one
// cluster). Usage: gobench ENDPOINTS PAIRS
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	eps := strings.Split(os.Args[1], ",")
	n, _ := strconv.Atoi(os.Args[2])
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		panic(err)
	}
	m := concurrency.NewMutex(s, "bench-go")
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		m.Lock(ctx)
		m.Unlock(ctx)
	}
	c0, t0 := cpu(), time.Now()
	for i := 0; i < n; i++ {
		if err := m.Lock(ctx); err != nil {
			panic(err)
		}
		if err := m.Unlock(ctx); err != nil {
			panic(err)
		}
	}
	el, c := time.Since(t0), cpu()-c0
	fmt.Printf("go clientv3 (gRPC): %d pairs, %.0f us/pair, CPU %.0f us/pair\n", n,
		float64(el.Microseconds())/float64(n), float64(c.Microseconds())/float64(n))
}
