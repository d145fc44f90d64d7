package sheets

import (
	"context"
	"encoding/json"
	"errors"
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

// TestSubmitLimits: a form takes SubmitsPerForm submissions per window and
// a user's forms together SubmitsPerUser; the next is refused with when to
// retry, refused and invalid submissions do not count, another user is not
// affected, and the window slides.
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
	if !errors.As(err, &limited) || limited.Scope != "form" || limited.Limit != 3 || limited.RetryAfter <= 50*time.Second || limited.RetryAfter > time.Minute {
		t.Fatalf("4th submission to f1: %v (%+v), want the form's limit with about a minute to wait", err, limited)
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
