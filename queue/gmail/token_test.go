package gmail_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// storedToken unseals the account's token as the pipeline stored it.
func (e *env) storedToken(id string) string {
	e.t.Helper()
	a := e.account(id)
	plain, err := e.db.Unseal(a.Token, a.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(plain)
}

func TestExpiredAccessTokenIsRefreshedAndSaved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	acc := e.connect(ann, 10)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	before := e.storedToken(acc.ID)
	if before == "" || e.fake.Calls(googlefake.MethodToken) != 1 {
		t.Fatalf("after connect: %d token calls, stored %q", e.fake.Calls(googlefake.MethodToken), before)
	}

	// Google refuses the access token before its expiry: the next call gets
	// 401, refreshes, saves and goes on.
	e.fake.ExpireAccessTokens(ann)
	if _, err := e.fake.Gmail.AddMessage(ann, googlefake.Message{Subject: "after expiry"}); err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	after := e.storedToken(acc.ID)
	if after == before || e.fake.Calls(googlefake.MethodToken) != 2 {
		t.Fatalf("token not refreshed and saved: %d token calls, changed %v", e.fake.Calls(googlefake.MethodToken), after != before)
	}
	if e.account(acc.ID).Status != store.AccountReady {
		t.Fatalf("status %s", e.account(acc.ID).Status)
	}
}

func TestShortLivedTokensAreRefreshedAsTheyExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{fake: googlefake.Options{AccessTokenTTL: time.Second}})
	acc := e.connect(ann, 10)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	mutate(t, e.fake, ann, 5)
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
}

func TestRevokedTokenPutsTheAccountInErrorAndDeadLettersItsTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	acc := e.connect(ann, 10)
	e.waitConverged(acc.ID, ann, 20*time.Second)

	e.fake.RevokeRefreshToken(ann)
	e.fake.ExpireAccessTokens(ann)
	if _, err := googlefake.NewGenerator(9, time.Time{}).Add(e.fake.Gmail, ann, 2); err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	testkit.Eventually(t, 10*time.Second, "the account in error", func() bool { return e.account(acc.ID).Status == store.AccountError })
	var dead []store.DeadLetter
	testkit.Eventually(t, 10*time.Second, "the sync dead-lettered", func() bool {
		_ = e.db.View(func(tx *store.Tx) (err error) { dead, _, err = tx.DeadLetters(gmail.TypeSync, "", 10); return err })
		return len(dead) == 1
	})
	if dead[0].Attempts != 1 {
		t.Fatalf("dead letter after %d attempts, want 1 (permanent)", dead[0].Attempts)
	}
	// Its event is the account's user's: their feed and webhooks hear of it.
	var evs []store.Event
	_ = e.db.View(func(tx *store.Tx) (err error) {
		evs, _, err = tx.Events(store.EventQuery{Types: map[string]bool{store.EventDeadLetterAdded: true}, Limit: 10})
		return err
	})
	if len(evs) != 1 || evs[0].UserID != e.user.ID || evs[0].AccountID != acc.ID {
		t.Fatalf("deadletter.added events %+v, want one of user %s and account %s", evs, e.user.ID, acc.ID)
	}
	a := e.account(acc.ID)
	if a.StatusReason == "" || a.LastError == "" {
		t.Fatalf("the account does not say what to do: %+v", a)
	}
	// Pushes for an account in error record nothing.
	e.notify(ann)
	if !e.idle() {
		t.Fatalf("a push for an account in error recorded work: %v", e.outbox())
	}

	// Reconnecting with a new grant brings it back.
	_, created, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: e.fake.AddAccount(ann)}})
	if err != nil || created {
		t.Fatalf("reconnect: %v, created %v", err, created)
	}
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if s := e.account(acc.ID).Status; s != store.AccountReady {
		t.Fatalf("after reconnect: %s", s)
	}
}

func TestRevokedTokenFailsMessageAddedPermanently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 0)
	e.syncNow()
	if _, err := e.fake.Gmail.AddMessage(ann, googlefake.Message{Subject: "x"}); err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	e.syncNow()
	recs := e.records(gmail.TypeMessageAdded)
	if len(recs) != 1 {
		t.Fatalf("%d message-added records", len(recs))
	}
	e.fake.RevokeRefreshToken(ann)
	e.fake.ExpireAccessTokens(ann)
	err := e.run(recs[0], recs[0].Payload)
	if !queue.IsPermanent(err) || !errors.Is(err, google.ErrRevoked) {
		t.Fatalf("message-added with a revoked grant: %v, want permanent ErrRevoked", err)
	}
	if s := e.account(acc.ID).Status; s != store.AccountError {
		t.Fatalf("status %s, want error", s)
	}
}

func TestDeletedAccountTasksFailPermanently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 0)
	e.syncNow()
	id, err := e.fake.Gmail.AddMessage(ann, googlefake.Message{Subject: "x"})
	if err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	e.syncNow()
	if err := e.fake.Gmail.MarkRead(ann, id); err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	e.syncNow()
	e.notify(ann) // nothing new: no sync recorded
	if err := e.fake.Gmail.MarkUnread(ann, id); err != nil {
		t.Fatal(err)
	}
	e.notify(ann) // a sync waits
	if _, err := e.p.Delete(context.Background(), acc.ID); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{gmail.TypeSync, gmail.TypeMessageAdded, gmail.TypeMessageRead} {
		recs := e.records(typ)
		if len(recs) == 0 {
			t.Fatalf("no %s record", typ)
		}
		if err := e.run(recs[0], recs[0].Payload); !queue.IsPermanent(err) || !errors.Is(err, gmail.ErrAccountGone) {
			t.Errorf("%s of a deleted account: %v, want permanent ErrAccountGone", typ, err)
		}
	}
	if _, err := e.p.Account(acc.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("account after delete: %v", err)
	}
}

// A full sync that fails until it goes to the dead letters puts the
// account in error, saying why and what to do (left "syncing" with nothing
// queued, it would hide the failure); a resync, or the dead letter's
// redrive, starts it again once the cause is fixed.
func TestDeadFullSyncPutsTheAccountInError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	refresh := e.fake.AddAccount(ann)
	if _, err := e.fake.Gmail.Generate(ann, 5, 7); err != nil {
		t.Fatal(err)
	}
	failList := func() *googlefake.FaultHandle {
		f, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesList, Code: 500})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	deadFullSync := func() store.DeadLetter {
		var dead []store.DeadLetter
		testkit.Eventually(t, 20*time.Second, "the full sync dead-lettered", func() bool {
			_ = e.db.View(func(tx *store.Tx) (err error) {
				dead, _, err = tx.DeadLetters(gmail.TypeFullSync, "", 10)
				return err
			})
			return len(dead) == 1
		})
		return dead[0]
	}
	inError := func(id string) {
		t.Helper()
		a := e.account(id)
		if a.Status != store.AccountError || !strings.Contains(a.StatusReason, "dead letters") || a.LastError == "" {
			t.Fatalf("after the dead full sync: status %q, reason %q, last error %q; want error with the reason and cause", a.Status, a.StatusReason, a.LastError)
		}
	}

	fault := failList()
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	dl := deadFullSync()
	inError(acc.ID)
	// The fix, then a resync: synced and ready.
	fault.Remove()
	if err := e.p.Resync(context.Background(), acc.ID); err != nil {
		t.Fatalf("resync of an account whose full sync died: %v", err)
	}
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if a := e.account(acc.ID); a.Status != store.AccountReady || a.StatusReason != "" {
		t.Fatalf("after the resync: status %q, reason %q; want ready", a.Status, a.StatusReason)
	}
	if err := e.q.Discard(dl.ID); err != nil {
		t.Fatal(err)
	}

	// Again, and this time its dead letter is redriven.
	fault = failList()
	if err := e.p.Resync(context.Background(), acc.ID); err != nil {
		t.Fatal(err)
	}
	dl = deadFullSync()
	inError(acc.ID)
	fault.Remove()
	if _, err := e.fake.Gmail.Generate(ann, 2, 8); err != nil {
		t.Fatal(err)
	}
	if n, missing, err := e.q.Redrive([]string{dl.ID}); n != 1 || len(missing) != 0 || err != nil {
		t.Fatalf("redrive: %d, missing %v, %v", n, missing, err)
	}
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if a := e.account(acc.ID); a.Status != store.AccountReady {
		t.Fatalf("after the redrive: status %q; want ready", a.Status)
	}
}
