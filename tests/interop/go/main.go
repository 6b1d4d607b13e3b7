// tests/interop/go: a Go service's view of an etcd lock, for test_etcd's
// go_interop cases. It takes the lock NAME with go.etcd.io/etcd/client/v3's
// concurrency.Mutex (the reference layout dlock speaks), or a side of the
// recipes' RWMutex ("read" or "write"), prints "held <key> <create
// revision>" (the RWMutex does not tell its key: "held - 0"), holds it until
// a line (or EOF) arrives on stdin, unlocks and prints "released".
//
//	etcd-go-locker ENDPOINT[,ENDPOINT...] NAME [mutex|read|write]
//
// With "conform" first it is the layout conformance check of conform.go,
// with "race" the mixed race of race.go.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "conform" {
		os.Exit(conform(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "race" {
		os.Exit(race(os.Args[2:]))
	}
	mode := "mutex"
	if len(os.Args) == 4 {
		mode = os.Args[3]
	}
	if len(os.Args) < 3 || len(os.Args) > 4 ||
		(mode != "mutex" && mode != "read" && mode != "write") {
		fmt.Fprintln(os.Stderr, "usage: etcd-go-locker ENDPOINTS NAME [mutex|read|write]")
		os.Exit(2)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Args[1], ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	if mode != "mutex" {
		rw := recipe.NewRWMutex(s, os.Args[2])
		lock, unlock := rw.Lock, rw.Unlock
		if mode == "read" {
			lock, unlock = rw.RLock, rw.RUnlock
		}
		if err := lock(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("held - 0")
		bufio.NewReader(os.Stdin).ReadString('\n')
		if err := unlock(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("released")
		return
	}
	m := concurrency.NewMutex(s, os.Args[2])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	resp, err := cli.Get(ctx, m.Key())
	if err != nil || len(resp.Kvs) != 1 {
		fmt.Fprintln(os.Stderr, "cannot read the lock's key", err)
		os.Exit(1)
	}
	fmt.Printf("held %s %d\n", m.Key(), resp.Kvs[0].CreateRevision)
	bufio.NewReader(os.Stdin).ReadString('\n')
	if err := m.Unlock(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("released")
}
