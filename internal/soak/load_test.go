package soak_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mailroom/internal/bench/story"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/rules"
)

type soakUser struct {
	id       string
	accounts []soakAccount
	rules    []*soakRule
}

type soakAccount struct{ id, email string }

// soakRule is a rule and every version the soak tried to save.
type soakRule struct {
	mu       sync.Mutex
	id       string
	label    string
	variants [][]rules.Condition
	// saved is the index in variants of the last version a save of which
	// was acknowledged (201 or 200); unknown the ones tried after it whose
	// answer was lost (the child died).
	saved   int
	unknown []int
	tries   int
	refused int // 429 (the save limit, conservative after a restart)
}

func (r *soakRule) spec(v int) rules.Spec {
	return rules.Spec{Label: r.label, Match: "any", Conditions: r.variants[v]}
}

// soakForm is a form and what the soak knows of its submissions.
type soakForm struct {
	mu       sync.Mutex
	id, book string
	accepted []string // ids answered 202, in answer order
	unknown  int      // requests cut by a kill: stored or not
	refused  int      // never reached a listener, or 503
	n        atomic.Int64
}

var (
	senders = []string{
		"GitHub <notifications@github.com>", "CI <ci@gitlab.com>", "Billing <billing@shop.example>",
		"Ann <ann@example.org>", "Bob <bob@example.net>", "News <news@letters.example>",
	}
	devVariants = [][]rules.Condition{
		{{Field: "from", Op: "contains", Value: "@github.com"}},
		{{Field: "from", Op: "contains", Value: "gitlab"}, {Field: "subject", Op: "contains", Value: "repo-1"}},
		{{Field: "subject", Op: "matches", Value: `\[repo-[0-3]\]`}},
		{{Field: "from", Op: "not_contains", Value: "example"}},
	}
	billVariants = [][]rules.Condition{
		{{Field: "subject", Op: "contains", Value: "invoice"}},
		{{Field: "from", Op: "equals", Value: "billing <BILLING@shop.example>"}},
		{{Field: "subject", Op: "matches", Value: `(?i)invoice \d*[02468]$`}},
	}
)

// setup makes the users, accounts (full sync), rules and forms through
// the first life's API, and waits until every account is ready.
func (w *world) setup() {
	w.start()
	p := w.current()
	plan := [][]string{{"a0@soak.example", "a1@soak.example"}, {"b0@soak.example"}}
	for ui, emails := range plan {
		u := &soakUser{}
		var got struct{ ID string }
		p.Must(http.MethodPost, "/api/v1/users", map[string]string{"email": fmt.Sprintf("owner%d@soak.example", ui), "name": "Owner"}, http.StatusCreated, &got)
		u.id = got.ID
		for _, email := range emails {
			refresh := w.fake.AddAccount(email)
			if err := story.AddThreads(w.fake, email, 40); err != nil {
				w.t.Fatal(err)
			}
			p.Must(http.MethodPost, "/api/v1/accounts", map[string]string{"userId": u.id, "email": email, "refreshToken": refresh}, http.StatusCreated, &got)
			u.accounts = append(u.accounts, soakAccount{id: got.ID, email: email})
		}
		for _, r := range []*soakRule{{label: "Dev", variants: devVariants}, {label: "Bills", variants: billVariants}} {
			var saved struct{ Rule struct{ ID string } }
			p.Must(http.MethodPost, "/api/v1/users/"+u.id+"/rules", r.spec(0), http.StatusCreated, &saved)
			r.id = saved.Rule.ID
			u.rules = append(u.rules, r)
		}
		w.users = append(w.users, u)
	}
	for i, acc := range []soakAccount{w.users[0].accounts[0], w.users[0].accounts[0], w.users[1].accounts[0]} {
		book, err := w.fake.Sheets.CreateSpreadsheet(acc.email, fmt.Sprintf("Soak %d", i))
		if err != nil {
			w.t.Fatal(err)
		}
		userID := w.users[0].id
		if i == 2 {
			userID = w.users[1].id
		}
		var got struct{ ID string }
		p.Must(http.MethodPost, "/api/v1/forms", map[string]any{"userId": userID, "accountId": acc.id, "spreadsheetId": book, "sheet": "Sheet1", "columns": []string{"n", "burst"}}, http.StatusCreated, &got)
		w.forms = append(w.forms, &soakForm{id: got.ID, book: book})
	}
	for _, u := range w.users {
		for _, acc := range u.accounts {
			w.waitReady(acc.id)
		}
	}
}

func (w *world) waitReady(accountID string) {
	testkit.EventuallyNil(w.t, time.Minute, "account "+accountID+" to be ready after its full sync", func() error {
		var a struct{ Status string }
		if err := w.current().JSON(http.MethodGet, "/api/v1/accounts/"+accountID, nil, http.StatusOK, &a); err != nil {
			return err
		}
		if a.Status != "ready" {
			return fmt.Errorf("status %s", a.Status)
		}
		return nil
	})
}

func (w *world) accounts() int {
	n := 0
	for _, u := range w.users {
		n += len(u.accounts)
	}
	return n
}

// startLoad starts every actor of the load; each stops when ctx ends.
func (w *world) startLoad(ctx context.Context, wg *sync.WaitGroup) {
	stream := uint64(100)
	goLoad := func(fn func(rng *rand.Rand)) {
		stream++
		rng := w.rng(stream)
		wg.Add(1)
		go func() { defer wg.Done(); fn(rng) }()
	}
	for _, u := range w.users {
		for _, acc := range u.accounts {
			goLoad(func(rng *rand.Rand) { w.mailboxLoad(ctx, rng, acc.email) })
		}
		goLoad(func(rng *rand.Rand) { w.ruleLoad(ctx, rng, u) })
	}
	for _, f := range w.forms {
		goLoad(func(rng *rand.Rand) { w.formLoad(ctx, rng, f) })
	}
	goLoad(func(rng *rand.Rand) { w.faultLoad(ctx, rng) })
}

// pause waits d or until ctx ends, and reports whether the load goes on.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// mailboxLoad changes the mailbox as its owner and correspondents would:
// new mail (now and then with a permanent fault on its fetch), reads,
// unreads, trash and back, stars, deletes. Each change makes a push.
func (w *world) mailboxLoad(ctx context.Context, rng *rand.Rand, email string) {
	g := w.fake.Gmail
	for n := 0; pause(ctx, jitter(rng, 50*time.Millisecond, 250*time.Millisecond)); n++ {
		msgs := g.Messages(email)
		m := msgs[rng.IntN(len(msgs))]
		var err error
		switch op := rng.IntN(100); {
		case op < 25:
			err = w.newMail(rng, email, n)
		case op < 60 && m.Unread():
			err = g.MarkRead(email, m.ID)
		case op < 60:
			err = g.MarkUnread(email, m.ID)
		case op < 80 && m.Trashed():
			err = g.Untrash(email, m.ID)
		case op < 80:
			err = g.Trash(email, m.ID)
		case op < 95 && slices.Contains(m.LabelIDs, googlefake.LabelStarred):
			err = g.RemoveLabels(email, m.ID, googlefake.LabelStarred)
		case op < 95:
			err = g.AddLabels(email, m.ID, googlefake.LabelStarred)
		case len(msgs) > 30:
			err = g.Delete(email, m.ID)
		}
		if err != nil && !errors.Is(err, googlefake.ErrUnknownThread) {
			w.t.Errorf("mailbox %s: %v", email, err)
			return
		}
	}
}

// newMail adds a message; one in 40 gets a permanent fault (400) on its
// first messages.get: its message-added task must become a dead letter
// (or, if a kill cut that attempt, run again and succeed).
func (w *world) newMail(rng *rand.Rand, email string, n int) error {
	from := senders[rng.IntN(len(senders))]
	subject := fmt.Sprintf("[repo-%d] issue %d", rng.IntN(7), n)
	if rng.IntN(3) == 0 {
		subject = fmt.Sprintf("Invoice %d", n)
	}
	id, err := w.fake.Gmail.AddMessage(email, googlefake.Message{From: from, To: email, Subject: subject, Body: "soak"})
	if err != nil || rng.IntN(40) != 0 {
		return err
	}
	h, err := w.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, MessageID: id, Code: http.StatusBadRequest, Message: "Invalid id value (injected)", Times: 1})
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.permanent[id] = h
	w.mu.Unlock()
	return nil
}

// ruleLoad saves a new version of one of the user's rules every 2 to 6 s.
func (w *world) ruleLoad(ctx context.Context, rng *rand.Rand, u *soakUser) {
	for pause(ctx, jitter(rng, 2*time.Second, 6*time.Second)) {
		r := u.rules[rng.IntN(len(u.rules))]
		r.mu.Lock()
		v := (r.saved + 1 + rng.IntN(len(r.variants)-1)) % len(r.variants)
		r.tries++
		r.mu.Unlock()
		status, _, err := w.current().Do(http.MethodPut, "/api/v1/rules/"+r.id, r.spec(v))
		w.trace.event("save rule %s (%s) variant %d %v -> %d %v", r.id, r.label, v, r.variants[v], status, err)
		r.mu.Lock()
		switch {
		case err == nil && status == http.StatusOK:
			r.saved, r.unknown = v, nil
		case err == nil && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable):
			r.refused++
		case err != nil && !refusedConn(err):
			r.unknown = append(r.unknown, v)
		case err == nil:
			w.t.Errorf("save rule %s: %d", r.id, status)
		}
		r.mu.Unlock()
	}
}

// refusedConn reports whether the request never reached a listener (the
// child was down): nothing can have been stored.
func refusedConn(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// formLoad posts bursts of 10 to 200 submissions (8 at a time) every 1 to
// 5 s.
func (w *world) formLoad(ctx context.Context, rng *rand.Rand, f *soakForm) {
	for burst := 1; pause(ctx, jitter(rng, time.Second, 5*time.Second)); burst++ {
		end := f.n.Load() + 10 + rng.Int64N(191)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := f.n.Add(1); i <= end && ctx.Err() == nil; i = f.n.Add(1) {
					w.submit(f, i, burst)
				}
			}()
		}
		wg.Wait()
	}
}

func (w *world) submit(f *soakForm, i int64, burst int) {
	status, raw, err := w.current().Do(http.MethodPost, "/api/v1/forms/"+f.id+"/submissions",
		map[string]any{"answers": map[string]string{"n": fmt.Sprint(i), "burst": fmt.Sprint(burst)}})
	var got struct{ ID string }
	if err == nil && status == http.StatusAccepted {
		if jerr := json.Unmarshal(raw, &got); jerr != nil || got.ID == "" {
			w.t.Errorf("202 with body %s", raw)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err == nil && status == http.StatusAccepted:
		f.accepted = append(f.accepted, got.ID)
	case refusedConn(err) || (err == nil && status == http.StatusServiceUnavailable):
		f.refused++
	case err != nil:
		f.unknown++
	default:
		w.t.Errorf("submission: %d %s", status, raw)
	}
}

// faultLoad injects one episode of Google trouble every 3 to 10 s, for 2
// to 6 s: server errors, quota refusals (Gmail's 403
// userRateLimitExceeded, Sheets' 429), dropped connections, slow history
// pages, and a Sheets write that lands but whose answer is lost.
func (w *world) faultLoad(ctx context.Context, rng *rand.Rand) {
	// The methods the load calls most, so that an episode meets calls.
	gmailMethods := []string{googlefake.MethodHistoryList, googlefake.MethodMessagesGet, googlefake.MethodMessagesModify,
		googlefake.MethodMessagesBatchModify}
	sheetsMethods := []string{googlefake.MethodValuesUpdate, googlefake.MethodValuesGet, googlefake.MethodSheetsGet}
	all := append(slices.Clone(gmailMethods), sheetsMethods...)
	for pause(ctx, jitter(rng, 3*time.Second, 10*time.Second)) {
		var f googlefake.Fault
		kind := ""
		switch rng.IntN(6) {
		case 0:
			kind, f = "server error", googlefake.Fault{Method: all[rng.IntN(len(all))], Code: []int{500, 503}[rng.IntN(2)], Probability: 0.3}
		case 1:
			kind, f = "Gmail quota refusal", googlefake.Fault{Method: gmailMethods[rng.IntN(len(gmailMethods))], Code: http.StatusForbidden, Reason: "userRateLimitExceeded", Message: "User-rate limit exceeded (injected)", Probability: 0.5}
		case 2:
			kind, f = "Sheets quota refusal", googlefake.Fault{Method: sheetsMethods[rng.IntN(len(sheetsMethods))], Code: http.StatusTooManyRequests, RetryAfter: time.Second, Probability: 0.5}
		case 3:
			kind, f = "dropped connection", googlefake.Fault{Method: all[rng.IntN(len(all))], Drop: true, Probability: 0.2}
		case 4:
			kind, f = "slow history", googlefake.Fault{Method: googlefake.MethodHistoryList, Latency: 300 * time.Millisecond}
		default:
			kind, f = "write landed, answer lost", googlefake.Fault{Method: googlefake.MethodValuesUpdate, AfterWrite: true, Drop: true, Times: 1}
		}
		h, err := w.fake.InjectFault(f)
		if err != nil {
			w.t.Errorf("inject %s: %v", kind, err)
			return
		}
		more := pause(ctx, jitter(rng, 2*time.Second, 6*time.Second))
		h.Remove()
		w.mu.Lock()
		w.figures.faults[kind] += h.Fired()
		w.figures.episodes[kind]++
		w.mu.Unlock()
		if !more {
			return
		}
	}
}
