package rules

import (
	"context"
	"sync"
	"time"

	"mailroom/queue"
)

// gate orders the batches that touch one account: batches of one job run
// side by side (they cover different threads), batches of different jobs
// take turns. So a batch of an older job that is still running when a newer
// job starts cannot write a message's labels after the newer job's batch
// has written them. A job that waits blocks newcomers of the job that holds
// the gate, so jobs alternate and none starves.
//
// The gate is in-process: with task workers in several processes, batches
// of different jobs for one account could overlap (see docs/how-it-works.md).
type gate struct {
	mu       sync.Mutex
	accounts map[string]*accountGate
}

type accountGate struct {
	job     string
	active  int
	waiting map[string]int // job id -> goroutines waiting
	changed chan struct{}  // closed (and replaced) whenever the gate opens
}

func newGate() *gate { return &gate{accounts: map[string]*accountGate{}} }

func (a *accountGate) othersWaiting(job string) bool {
	for j, n := range a.waiting {
		if j != job && n > 0 {
			return true
		}
	}
	return false
}

func (a *accountGate) broadcast() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// acquire waits until a batch of job may work on the account, or ctx ends.
// The caller must call release once done.
func (g *gate) acquire(ctx context.Context, account, job string) (release func(), err error) {
	g.mu.Lock()
	a := g.accounts[account]
	if a == nil {
		a = &accountGate{waiting: map[string]int{}, changed: make(chan struct{})}
		g.accounts[account] = a
	}
	registered := false
	for {
		if a.active == 0 || (a.job == job && !a.othersWaiting(job)) {
			if registered {
				g.unwait(a, job)
			}
			a.job = job
			a.active++
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.release(account, a) }) }, nil
		}
		if !registered {
			a.waiting[job]++
			registered = true
		}
		changed := a.changed
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			g.leave(account, a, job)
			return nil, ctx.Err()
		case <-queue.Stopping(ctx):
			g.leave(account, a, job)
			return nil, queue.HandBack(time.Second)
		case <-changed:
		}
		g.mu.Lock()
	}
}

// leave takes a waiter of job out of the account's gate.
func (g *gate) leave(account string, a *accountGate, job string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unwait(a, job)
	a.broadcast()
	g.forget(account, a)
}

func (g *gate) unwait(a *accountGate, job string) {
	if a.waiting[job]--; a.waiting[job] <= 0 {
		delete(a.waiting, job)
	}
}

func (g *gate) release(account string, a *accountGate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a.active--
	if a.active == 0 {
		a.broadcast()
	}
	g.forget(account, a)
}

// forget drops an idle account's gate.
func (g *gate) forget(account string, a *accountGate) {
	if a.active == 0 && len(a.waiting) == 0 && g.accounts[account] == a {
		delete(g.accounts, account)
	}
}
