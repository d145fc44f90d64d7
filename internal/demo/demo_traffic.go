package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/gmail"
)

// The traffic generator's pace.
const (
	demoMailEvery    = 3 * time.Second         // new mail, on average
	demoStateEvery   = 2500 * time.Millisecond // a read, trash, star...
	demoSubmitEvery  = 400 * time.Millisecond  // form submissions
	demoBurstFirst   = 90 * time.Second        // the first burst of submissions
	demoBurstEvery   = 4 * time.Minute         // then one about this often
	demoRuleEdit     = 45 * time.Second        // a rule edited
	demoRecentKeep   = 300                     // live messages remembered per account
	demoPollReadyFor = 30 * time.Minute        // how long the milestones wait for a sync
)

// run seeds mailroom, then keeps it busy until ctx ends.
func (d *demo) run(ctx context.Context) {
	start := time.Now()
	ids, err := d.seed(ctx)
	if err != nil {
		return // ctx ended
	}
	d.log.Info("demo: seeded; the traffic generator is running", "took", time.Since(start).Round(time.Millisecond),
		"user_id", ids.userID, "forms", len(ids.forms), "rules", len(ids.rules))
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context, demoIDs){d.milestones, d.mailLoop, d.stateLoop, d.formLoop, d.ruleLoop} {
		wg.Go(func() { loop(ctx, ids) })
	}
	wg.Wait()
}

// jitter returns d scaled by a random factor in [0.5, 1.5).
func demoJitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + mrand.Float64()))
}

// ---- milestones: what happens once the accounts are in sync ----

// milestones waits for the accounts to finish their first sync, then: on
// the small account, delivers the one message whose download fails until
// it is dead-lettered (its dead letter and alert show the failure path); once both are in
// sync, injects a small share of Gmail faults and saves every rule again
// so that a reclassify covers the whole mirror. When the failing
// message's dead letter appears, its fault is lifted, so that a redrive
// from the admin page then succeeds.
func (d *demo) milestones(ctx context.Context, ids demoIDs) {
	var (
		poisonID string
		poison   *googlefake.FaultHandle
		faulted  bool
		lifted   bool
		ready    = make([]bool, len(demoAccounts))
		deadline = time.Now().Add(demoPollReadyFor)
	)
	for demoSleep(ctx, time.Second) == nil {
		all := true
		for i, id := range ids.accounts {
			if id == "" || ready[i] {
				continue
			}
			var a demoAPIAccount
			if err := d.api.do(ctx, http.MethodGet, "/api/v1/accounts/"+id, nil, &a); err == nil && a.Status == "ready" {
				ready[i] = true
				d.log.Info("demo: Gmail account in sync", "email", demoAccounts[i].Email)
			}
			all = all && ready[i]
		}
		if poison == nil && ready[1] {
			id, h, err := d.deliverPoison()
			if err != nil {
				d.log.Warn("demo: cannot deliver the failing message", "err", err)
			} else {
				poisonID, poison = id, h
			}
		}
		if all && !faulted {
			faulted = true
			d.injectFaults()
			d.resaveRules(ctx, ids)
		}
		if poison != nil && !lifted && d.deadLettered(ctx, poisonID) {
			lifted = true
			poison.Remove()
			d.log.Info("demo: the failing message reached the dead-letter archive; its fault is lifted, so a redrive now succeeds",
				"message_id", poisonID, "failed_calls", poison.Fired())
		}
		if faulted && lifted || poison == nil && time.Now().After(deadline) {
			return
		}
	}
}

// deliverPoison adds to the personal mailbox a message whose messages.get
// answers 500 until the demo lifts the fault (once it is dead-lettered).
func (d *demo) deliverPoison() (string, *googlefake.FaultHandle, error) {
	email := demoAccounts[1].Email
	id, err := d.fake.Gmail.AddMessage(email, googlefake.Message{
		From:    "Office Scanner <scanner@acme.example>",
		To:      email,
		Subject: "Scanned document 0042.pdf (the demo's message that fails until it is dead-lettered)",
		Body:    "This message is part of the mailroom demo: every attempt to download it fails with a server error until it lands in the dead-letter archive; then the fault is lifted, so a redrive brings it in.",
	})
	if err != nil {
		return "", nil, err
	}
	// Added right after the message: its first download is at least a
	// push, a sync and a queue hop away.
	h, err := d.fake.InjectFault(googlefake.Fault{
		Method: googlefake.MethodMessagesGet, MessageID: id, Code: http.StatusInternalServerError,
		Message: "demo: this message fails to download until it is dead-lettered (then a redrive succeeds)",
	})
	if err != nil {
		return "", nil, err
	}
	d.log.Info("demo: delivered the message whose download fails until it is dead-lettered; watch it retry, move to the dead letters, then redrive it",
		"email", email, "message_id", id)
	return id, h, nil
}

// injectFaults makes a small share of Gmail calls fail or slow down:
// reads are retried at once by the Google adapter, writes by the task's
// retry policy.
func (d *demo) injectFaults() {
	for _, f := range []googlefake.Fault{
		{Method: googlefake.MethodMessagesGet, Code: http.StatusServiceUnavailable, Probability: 0.02},
		{Method: googlefake.MethodMessagesModify, Code: http.StatusServiceUnavailable, Probability: 0.03},
		{Method: googlefake.MethodMessagesBatchModify, Code: http.StatusServiceUnavailable, Probability: 0.02},
		{Method: googlefake.MethodHistoryList, Latency: 400 * time.Millisecond, Probability: 0.1},
	} {
		if _, err := d.fake.InjectFault(f); err != nil {
			d.log.Warn("demo: inject a fault", "err", err)
		}
	}
	d.log.Info("demo: the accounts are in sync; a few Gmail calls now fail (2-3% answer 503) to show retries")
}

// resaveRules saves every rule unchanged, so that one reclassify covers
// every message of the now complete mirror.
func (d *demo) resaveRules(ctx context.Context, ids demoIDs) {
	for _, r := range demoRules() {
		id := ids.rules[r.Label]
		if id == "" {
			continue
		}
		if err := d.api.do(ctx, http.MethodPut, "/api/v1/rules/"+id, r.Variants[0], nil); err != nil && ctx.Err() == nil {
			d.log.Warn("demo: save a rule again", "label", r.Label, "err", err)
		}
	}
}

type demoAPIDeadLetter struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// deadLettered reports whether a gmail:message-added dead letter names
// the message.
func (d *demo) deadLettered(ctx context.Context, messageID string) bool {
	var list struct {
		DeadLetters []demoAPIDeadLetter `json:"deadletters"`
	}
	if err := d.api.do(ctx, http.MethodGet, "/api/v1/deadletters?type="+gmail.TypeMessageAdded+"&limit=100", nil, &list); err != nil {
		return false
	}
	for _, dl := range list.DeadLetters {
		if strings.Contains(string(dl.Payload), messageID) {
			return true
		}
	}
	return false
}

// ---- Gmail traffic ----

// demoMail are messages made to match the demo rules.
var demoMail = []googlefake.Message{
	{From: "GitHub <noreply@github.example>", Subject: "[mailroom] Pull request #%d: shorten the reclassify debounce", Body: "alex approved this pull request.\n\nReply to this email directly or view it on GitHub.\nUnsubscribe from these notifications."},
	{From: "GitHub <noreply@github.example>", Subject: "[mailroom] Issue #%d: flaky test in CI", Body: "A new issue was opened.\n\nYou are receiving this because you are subscribed to this thread."},
	{From: "Acme Coffee <receipts@acmecoffee.example>", Subject: "Your receipt from Acme Coffee #%d", Body: "Thanks for your order. Total: 4.20 EUR."},
	{From: "Cloud Billing <billing@cloud.example>", Subject: "Invoice #%d is available", Body: "Your monthly invoice is ready. Log in to see the details."},
	{From: "Shop <orders@shop.example>", Subject: "Your order #%d has shipped", Body: "Your parcel is on its way."},
	{From: "The Weekly Digest <digest@news.example>", Subject: "This week: %d things worth reading", Body: "The best links of the week.\n\nUnsubscribe at any time."},
}

// mailLoop delivers new mail every few seconds, some of it made to match
// the rules, the rest from a generator of believable conversations.
func (d *demo) mailLoop(ctx context.Context, ids demoIDs) {
	gens := make([]*googlefake.Generator, len(demoAccounts))
	for i := range gens {
		gens[i] = googlefake.NewGenerator(mrand.Uint64(), time.Time{})
	}
	for demoSleep(ctx, demoJitter(demoMailEvery)) == nil {
		i := 0
		if mrand.Float64() < 0.3 {
			i = 1
		}
		email := demoAccounts[i].Email
		var id string
		var err error
		if mrand.Float64() < 0.3 {
			m := demoMail[mrand.IntN(len(demoMail))]
			m.Subject = fmt.Sprintf(m.Subject, 1000+mrand.IntN(9000))
			m.To = email
			id, err = d.fake.Gmail.AddMessage(email, m)
		} else {
			var got []string
			got, err = gens[i].Add(d.fake.Gmail, email, 1)
			if len(got) > 0 {
				id = got[0]
			}
		}
		if err != nil {
			d.log.Warn("demo: deliver mail", "email", email, "err", err)
			continue
		}
		d.mu.Lock()
		d.recent[i] = append(d.recent[i], id)
		if len(d.recent[i]) > demoRecentKeep {
			d.recent[i] = d.recent[i][len(d.recent[i])-demoRecentKeep:]
		}
		d.mu.Unlock()
	}
}

// pickMessage returns a message id of account i: mostly recent live mail,
// sometimes an older one.
func (d *demo) pickMessage(i int) (string, bool) {
	d.mu.Lock()
	recent := d.recent[i]
	var id string
	if len(recent) > 0 && mrand.Float64() < 0.7 {
		id = recent[mrand.IntN(len(recent))]
	}
	d.mu.Unlock()
	if id == "" && len(d.seeded[i]) > 0 {
		id = d.seeded[i][mrand.IntN(len(d.seeded[i]))]
	}
	return id, id != ""
}

// stateLoop changes messages as a person reading mail would: mostly reads,
// some trashes, stars and "mark as unread", the odd restore.
func (d *demo) stateLoop(ctx context.Context, ids demoIDs) {
	g := d.fake.Gmail
	for demoSleep(ctx, demoJitter(demoStateEvery)) == nil {
		i := 0
		if mrand.Float64() < 0.3 {
			i = 1
		}
		email := demoAccounts[i].Email
		id, ok := d.pickMessage(i)
		if !ok {
			continue
		}
		m, ok := g.Message(email, id)
		if !ok {
			continue
		}
		var err error
		switch p := mrand.Float64(); {
		case m.Trashed():
			if p < 0.2 {
				err = g.Untrash(email, id)
			}
		case m.Unread() && p < 0.75:
			err = g.MarkRead(email, id)
		case p < 0.2:
			err = g.Trash(email, id)
		case p < 0.3:
			err = g.AddLabels(email, id, googlefake.LabelStarred)
		case !m.Unread() && p < 0.45:
			err = g.MarkUnread(email, id)
		}
		if err != nil && !errors.Is(err, googlefake.ErrUnknownMessage) {
			d.log.Warn("demo: change a message", "email", email, "err", err)
		}
	}
}

// ---- forms ----

var (
	demoNames     = []string{"Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson", "Linus Torvalds", "Barbara Liskov", "Ken Thompson", "Margaret Hamilton", "Donald Knuth", "Frances Allen", "Dennis Ritchie", "Radia Perlman", "Edsger Dijkstra", "Hedy Lamarr", "Tim Berners-Lee", "Shafi Goldwasser"}
	demoSessions  = []string{"Keynote", "Workshop: queues in practice", "Workshop: Gmail push", "Panel: running one binary for a year", "Lightning talks"}
	demoDiets     = []string{"none", "none", "none", "vegetarian", "vegan", "gluten-free"}
	demoFeedbacks = []string{"Setup took two minutes.", "The dead-letter page saved my weekend.", "Would love dark mode in the charts.", "Rules apply faster than I expected.", "Please add CSV export.", "Works great behind our proxy.", "The demo mode sold it to my team."}
)

// answers makes one believable submission for form i.
func demoAnswers(i int) map[string]string {
	name := demoNames[mrand.IntN(len(demoNames))]
	email := strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(name, " ", "."), "-", "")) + "@example.org"
	if i == 0 {
		return map[string]string{"name": name, "email": email, "session": demoSessions[mrand.IntN(len(demoSessions))], "dietary": demoDiets[mrand.IntN(len(demoDiets))]}
	}
	return map[string]string{"name": name, "email": email, "rating": fmt.Sprint(3 + mrand.IntN(3)), "comment": demoFeedbacks[mrand.IntN(len(demoFeedbacks))]}
}

// formLoop submits to the forms at a steady pace, with a burst of several
// hundred submissions now and then (the flush-at-threshold path).
func (d *demo) formLoop(ctx context.Context, ids demoIDs) {
	nextBurst := time.Now().Add(demoBurstFirst)
	var failures int
	var warned time.Time
	submit := func(i int) {
		err := d.api.do(ctx, http.MethodPost, "/api/v1/forms/"+ids.forms[i]+"/submissions", map[string]any{"answers": demoAnswers(i)}, nil)
		if err != nil && ctx.Err() == nil {
			failures++
			if time.Since(warned) > time.Minute {
				d.log.Warn("demo: form submission refused", "failures", failures, "err", err)
				warned = time.Now()
			}
		}
	}
	for demoSleep(ctx, demoJitter(demoSubmitEvery)) == nil {
		submit(mrand.IntN(len(ids.forms)))
		if time.Now().After(nextBurst) {
			i := mrand.IntN(len(ids.forms))
			// 300 to 500: a burst may fill a buffer (the flush at once at
			// 500) and stays well within MAILROOM_SUBMISSIONS_PER_FORM's
			// burst of 5,000 with the steady pace beside it.
			n := d.scaled(300+mrand.IntN(201), 20)
			d.log.Info("demo: a burst of form submissions", "form_id", ids.forms[i], "submissions", n)
			for range n {
				if ctx.Err() != nil {
					return
				}
				submit(i)
			}
			nextBurst = time.Now().Add(demoJitter(demoBurstEvery))
		}
	}
}

// ---- rules ----

// ruleLoop edits a rule now and then, switching it between its two
// variants, so that the debounce, the reclassify and the stale skip run.
func (d *demo) ruleLoop(ctx context.Context, ids demoIDs) {
	rules := demoRules()
	variant := make([]int, len(rules))
	for n := 0; demoSleep(ctx, demoJitter(demoRuleEdit)) == nil; n++ {
		i := n % len(rules)
		id := ids.rules[rules[i].Label]
		if id == "" {
			continue
		}
		variant[i] = 1 - variant[i]
		err := d.api.do(ctx, http.MethodPut, "/api/v1/rules/"+id, rules[i].Variants[variant[i]], nil)
		switch {
		case err == nil:
			d.log.Info("demo: rule edited", "label", rules[i].Label, "variant", variant[i]+1)
		case demoStatusOf(err) == http.StatusTooManyRequests:
			variant[i] = 1 - variant[i]
		case ctx.Err() == nil:
			d.log.Warn("demo: edit a rule", "label", rules[i].Label, "err", err)
		}
	}
}
