// tests/interop/go: a Go service's view of an etcd lock, for test_etcd's
// go_interop case. It takes the lock NAME with go.etcd.io/etcd/client/v3's
// concurrency.Mutex (the reference layout dlock speaks), prints
// "held <key> <create revision>", holds it until a line (or EOF) arrives on
// stdin, unlocks and prints "released".
//
//	etcd-go-locker ENDPOINT[,ENDPOINT...] NAME
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
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: etcd-go-locker ENDPOINTS NAME")
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
