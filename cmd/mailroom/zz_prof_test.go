package main

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"testing"

	"time"
)

var (
	mu     sync.Mutex
	hook   func(string)
	lastAt = map[string]time.Time{}
	counts = map[string]int{}
)

func TestZZProfGmail(t *testing.T) {
	if os.Getenv("ZZPROF") == "" {
		t.Skip()
	}
	debug.SetGCPercent(400)
	ctx := context.Background()
	g, err := newGmailBench(ctx, gmailBenchOptions{messages: 2000, unread: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if err := mixHistory(g.fake.Gmail, benchMailbox, 10000, 7); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mu.Lock()
	zzHook = func(typ string) {
		mu.Lock()
		lastAt[typ] = time.Now()
		counts[typ]++
		mu.Unlock()
	}
	mu.Unlock()
	if err := g.push(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.waitSynced(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Log("synced after", time.Since(start))
	if err := g.waitIdle(ctx, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Log("idle after", time.Since(start), g.applied)
	for typ, at := range lastAt {
		t.Log(typ, at.Sub(start), counts[typ])
	}
}
