package sheets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/store"
)

// trySubmit submits one answer and returns the error.
func (e *env) trySubmit(formID, name string) error {
	raw, _ := json.Marshal(name)
	_, err := e.p.Submit(context.Background(), formID, map[string]json.RawMessage{"name": raw})
	return err
}

// TestSubmitLimits: a form takes SubmitsPerForm submissions at once and a
// user's forms together SubmitsPerUser; the next is refused with when to
// retry (when a token is back: a window over the limit), refused and
// invalid submissions do not count, another user is not affected, and the
// allowances refill.
func TestSubmitLimits(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		offset time.Duration
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	e := newEnv(t, envOptions{cfg: Config{SubmitsPerForm: 3, SubmitsPerUser: 5, SubmitWindow: time.Minute, Now: clock}})
	a := e.account("limits@example.com")
	f1, f2 := e.form(a, "name"), e.form(a, "name")

	for i := range 3 {
		if err := e.trySubmit(f1.ID, "ok"); err != nil {
			t.Fatalf("submission %d to f1: %v", i, err)
		}
	}
	var limited *SubmitLimitError
	err := e.trySubmit(f1.ID, "over")
	if !errors.As(err, &limited) || limited.Scope != "form" || limited.Limit != 3 || limited.RetryAfter <= 15*time.Second || limited.RetryAfter > 20*time.Second {
		t.Fatalf("4th submission to f1: %v (%+v), want the form's limit with about 20s (a minute / 3) to wait", err, limited)
	}
	// An invalid submission is refused for what it is and does not count.
	if _, err := e.p.Submit(context.Background(), f2.ID, map[string]json.RawMessage{"nope": json.RawMessage(`"x"`)}); err == nil || errors.Is(err, ErrSubmitLimited) {
		t.Fatalf("invalid submission: %v", err)
	}
	for i := range 2 {
		if err := e.trySubmit(f2.ID, "ok"); err != nil {
			t.Fatalf("submission %d to f2: %v", i, err)
		}
	}
	err = e.trySubmit(f2.ID, "over")
	if !errors.As(err, &limited) || limited.Scope != "user" || limited.Limit != 5 {
		t.Fatalf("6th submission of the user: %v, want the user's limit", err)
	}

	// Another user's form has its own counts.
	var other store.User
	if err := e.db.Update(func(tx *store.Tx) error {
		var err error
		other, err = tx.UserCreate("other@example.com", "Other")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b := e.account("other-account@example.com")
	b.UserID = other.ID
	if err := e.db.Update(func(tx *store.Tx) error { return tx.AccountPut(b) }); err != nil {
		t.Fatal(err)
	}
	id, err := e.fake.Sheets.CreateSpreadsheet(b.Email, "Other")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.p.CreateForm(context.Background(), FormInput{UserID: other.ID, AccountID: b.ID, SpreadsheetID: id, Sheet: "Sheet1", Columns: []string{"name"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.trySubmit(g.ID, "ok"); err != nil {
		t.Fatalf("another user's form: %v", err)
	}

	mu.Lock()
	offset = 61 * time.Second
	mu.Unlock()
	if err := e.trySubmit(f1.ID, "later"); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "every accepted row written", func() bool {
		return e.formView(f1.ID).RowsWritten == 4 && e.formView(f2.ID).RowsWritten == 2
	})
}

// TestBacklogFull: a form in error keeps accepting rows up to MaxWaiting,
// then refuses new ones (saying why), keeps every row it accepted, and
// accepts again once its rows are written.
func TestBacklogFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 200 * time.Millisecond, RecheckMax: time.Hour, MaxWaiting: 3}})
	a := e.account("backlog@example.com")
	f := e.form(a, "name")
	if _, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 404}); err != nil {
		t.Fatal(err)
	}
	subs := []store.Submission{e.submit(f.ID, map[string]string{"name": "1"})}
	e.waitState(f.ID, "error")
	subs = append(subs, e.submit(f.ID, map[string]string{"name": "2"}), e.submit(f.ID, map[string]string{"name": "3"}))
	var full *BacklogFullError
	err := e.trySubmit(f.ID, "4")
	if !errors.As(err, &full) || full.Waiting != 3 || full.Limit != 3 || full.LastError == "" {
		t.Fatalf("4th row of a form in error with 3 waiting: %v (%+v), want BacklogFullError with the form's error", err, full)
	}
	if v := e.formView(f.ID); v.Buffered != 3 {
		t.Fatalf("buffered after the refusal: %d, want 3", v.Buffered)
	}
	e.fake.ClearFaults()
	if _, err := e.p.Retry(f.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the 3 waiting rows written", func() bool { return e.formView(f.ID).RowsWritten == 3 })
	e.checkRows(f, subs)
	if err := e.trySubmit(f.ID, "5"); err != nil {
		t.Fatalf("after the rows are written: %v", err)
	}
}

// TestSubmitLimiterBurstThenRefill: with the default limits a form takes a
// burst of DefaultSubmitsPerForm at once and a user DefaultSubmitsPerUser
// over its forms, while a flood sustained past the refill rate (200 a
// second to one form; 600 a second over 24 forms of a user) is refused
// once the burst is spent, after which the form or user gets its refill
// rate and no more.
func TestSubmitLimiterBurstThenRefill(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newSubmitLimiter(DefaultSubmitsPerForm, DefaultSubmitsPerUser, DefaultSubmitWindow)
	for i := range DefaultSubmitsPerForm {
		if err := l.take("burst", "u1", t0); err != nil {
			t.Fatalf("submission %d of a burst to one form: %v", i, err)
		}
	}
	for i := range DefaultSubmitsPerUser {
		if err := l.take(fmt.Sprint("f", i%24), "u2", t0); err != nil {
			t.Fatalf("submission %d of a burst over one user's forms: %v", i, err)
		}
	}

	// flood offers perSecond submissions a second, spread over forms, for
	// two minutes from start, and returns when the first was refused and
	// how many were taken from then on.
	flood := func(user string, forms, perSecond int, start time.Time) (firstRefusal time.Duration, takenAfter int) {
		var limited *SubmitLimitError
		for i := range 120 * perSecond {
			at := time.Duration(i) * time.Second / time.Duration(perSecond)
			err := l.take(fmt.Sprint(user, "-f", i%forms), user, start.Add(at))
			switch {
			case err == nil && firstRefusal > 0:
				takenAfter++
			case err != nil && !errors.As(err, &limited):
				t.Fatalf("flood of %s: %v", user, err)
			case err != nil && firstRefusal == 0:
				firstRefusal = at
			}
		}
		return firstRefusal, takenAfter
	}
	refillForm := float64(DefaultSubmitsPerForm) / DefaultSubmitWindow.Seconds() // about 83 a second
	at, taken := flood("u3", 1, 200, t0)
	// 200 a second against a refill of 83 spends 5,000 in about 43 s.
	if want := time.Duration(float64(DefaultSubmitsPerForm) / (200 - refillForm) * float64(time.Second)); at < want-time.Second || at > want+time.Second {
		t.Errorf("a form flooded at 200/s first refused after %s, want about %s", at, want)
	}
	if rate := float64(taken) / (120*time.Second - at).Seconds(); rate < refillForm-2 || rate > refillForm+2 {
		t.Errorf("a flooded form took %.1f a second once limited, want its refill rate %.1f", rate, refillForm)
	}
	refillUser := float64(DefaultSubmitsPerUser) / DefaultSubmitWindow.Seconds() // about 333 a second
	at, taken = flood("u4", 24, 600, t0)
	if want := time.Duration(float64(DefaultSubmitsPerUser) / (600 - refillUser) * float64(time.Second)); at < want-time.Second || at > want+time.Second {
		t.Errorf("a user flooded at 600/s over 24 forms first refused after %s, want about %s", at, want)
	}
	if rate := float64(taken) / (120*time.Second - at).Seconds(); rate < refillUser-5 || rate > refillUser+5 {
		t.Errorf("a flooded user took %.1f a second once limited, want its refill rate %.1f", rate, refillUser)
	}
}

// TestUserBytesBound: a user whose forms keep MaxUserBytes of submissions
// is refused (UserBytesError, another user is not), every row it had been
// accepted is written, and once written rows are pruned it is accepted
// again.
func TestUserBytesBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 100 * time.Millisecond, MaxUserBytes: 2000, Retention: time.Nanosecond}})
	a := e.account("bytes@example.com")
	f1, f2 := e.form(a, "name"), e.form(a, "name")
	var subs1, subs2 []store.Submission
	var kept *UserBytesError
	for i := 0; ; i++ {
		f, subs := f1, &subs1
		if i%2 == 1 {
			f, subs = f2, &subs2
		}
		raw, _ := json.Marshal(fmt.Sprint("answer ", i))
		s, err := e.p.Submit(context.Background(), f.ID, map[string]json.RawMessage{"name": raw})
		if err != nil {
			if !errors.As(err, &kept) || kept.Limit != 2000 || kept.Stored < 2000 || kept.RetryAfter <= 0 {
				t.Fatalf("submission %d: %v (%+v), want UserBytesError past 2000 bytes", i, err, kept)
			}
			break
		}
		*subs = append(*subs, s)
		if i > 100 {
			t.Fatal("100 submissions accepted within 2000 bytes")
		}
	}
	if len(subs1)+len(subs2) < 10 {
		t.Fatalf("refused after %d submissions, want about 2000 bytes of them", len(subs1)+len(subs2))
	}

	// Nothing accepted is lost: every row reaches its sheet.
	testkit.Eventually(t, 10*time.Second, "every accepted row written", func() bool {
		return e.formView(f1.ID).RowsWritten == len(subs1) && e.formView(f2.ID).RowsWritten == len(subs2)
	})
	e.checkRows(f1, subs1)
	e.checkRows(f2, subs2)

	// Written rows older than the retention go, and with them the bytes.
	if _, err := e.p.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.trySubmit(f1.ID, "after pruning"); err != nil {
		t.Fatalf("after the written rows were pruned: %v", err)
	}
}
